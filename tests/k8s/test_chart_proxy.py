"""The chart's proxy values reach the operator container as the variables its HTTP and gRPC clients read.

Rendered with Helm's engine. gRPC's C core reads only the lower-case names (grpc_proxy, https_proxy,
http_proxy, no_proxy), Python's urllib either; both are set. `$(KUBERNETES_SERVICE_HOST)` in NO_PROXY is
expanded by the kubelet from the service variables of the pod, which no rendering test sees.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from .test_chart import CHART, render


def _env(values: dict[str, Any]) -> dict[str, str]:
    deployment = next(d for d in render(values) if d["kind"] == "Deployment")
    return {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_no_proxy_by_default() -> None:
    assert _env({}) == {"PYTHONUNBUFFERED": "1"}


def test_proxy_values_become_both_spellings_and_in_cluster_addresses_stay_direct() -> None:
    # Prepare
    values = {"proxy": {"httpProxy": "http://proxy.corp:3128", "httpsProxy": "http://proxy.corp:3129",
                        "noProxy": ["10.0.0.0/8", ".corp.example"]}}  # fmt: skip
    # Execute
    env = _env(values)
    # Assert
    for name, value in (("HTTP_PROXY", "http://proxy.corp:3128"), ("HTTPS_PROXY", "http://proxy.corp:3129")):
        assert env[name] == env[name.lower()] == value
    direct = env["NO_PROXY"].split(",")
    assert env["no_proxy"] == env["NO_PROXY"]
    assert direct == ["$(KUBERNETES_SERVICE_HOST)", ".svc", ".cluster.local", "localhost", "127.0.0.1",
                      "10.0.0.0/8", ".corp.example"]  # fmt: skip


def test_only_the_proxy_given_is_set() -> None:
    env = _env({"proxy": {"httpsProxy": "http://proxy.corp:3128"}})
    assert "HTTP_PROXY" not in env and "http_proxy" not in env
    assert env["https_proxy"] == "http://proxy.corp:3128" and env["no_proxy"].startswith("$(KUBERNETES_SERVICE_HOST),")


@pytest.mark.parametrize("bad", ["proxy.corp:3128", "socks5://proxy:1080"])
def test_a_proxy_without_an_http_scheme_is_refused(bad: str) -> None:
    with pytest.raises(helm.HelmValuesError, match="httpsProxy"):
        helm.Chart.load(str(CHART)).validate_schema({"proxy": {"httpsProxy": bad}})
