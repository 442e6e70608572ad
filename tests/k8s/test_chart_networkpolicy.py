"""The chart's NetworkPolicies, rendered with Helm's engine, select the pods the chart and the operator create.

Selectors are matched as the API server's LabelSelector does (matchLabels and matchExpressions, all
terms ANDed; an empty selector picks every pod) against the pod templates of the rendered operator
Deployment and of the operator's builders; named ports must be ports of the selected containers. What a
cluster still does differently: only a CNI that enforces NetworkPolicy (Calico, Cilium, ...) applies
them, and the node's own traffic (kubelet probes) is always allowed.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from geofed_operator.cloud_builders import FederationObject, build_ps_deployment
from geofed_operator.shard_builders import build_shard_deployment
from geofed_operator.site_builders import SiteClientObject, build_client_job
from geofed_operator.trainer_builders import build_trainer_deployment

from .test_chart import KUBE_VERSION, render


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term["key"], term["operator"], term.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _fed(**spec: Any) -> FederationObject:
    return FederationObject.from_body({"metadata": {"name": "demo", "namespace": "ml"}, "spec": spec}, "ps:1")


def _pod(workload: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    """Labels of a workload's pod and its containers' port names."""
    template = workload["spec"]["template"]
    ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", []) if "name" in p}
    return template["metadata"]["labels"], ports


PS = _pod(build_ps_deployment(_fed(), config_hash="h"))
GROUP_PS = _pod(build_ps_deployment(_fed(groups=[{"name": "us-east"}, {"name": "eu-west"}]), config_hash="h",
                                    group="eu-west"))  # fmt: skip
SHARD = _pod(build_shard_deployment(_fed(psShards=2, paradigm={"name": "pretrain"}), 1, config_hash="h"))
TRAINER = _pod(build_trainer_deployment(_fed(paradigm={"name": "fsl-sage", "cutLayer": 1}), config_hash="h"))
CLIENT_BODY = {"metadata": {"name": "c", "namespace": "ml"}, "spec": {
    "federation": "demo", "site": "uw", "psAddress": "ps.example.org:7443",
    "credentialSecretRef": {"name": "cred"}, "data": {"pvc": {"claimName": "d"}}}}  # fmt: skip
CLIENT = _pod(build_client_job(SiteClientObject.from_body(CLIENT_BODY, "c:1"), 1, "c-token-1"))


def _policies(values: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in render(values) if d["kind"] == "NetworkPolicy"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    return {(d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"] for d in docs}


def _operator_pod(values: dict[str, Any]) -> dict[str, str]:
    deployment = next(d for d in render(values) if d["kind"] == "Deployment")
    return deployment["spec"]["template"]["metadata"]["labels"]


def _port_names(rule: dict[str, Any]) -> set[str]:
    return {p["port"] for p in rule.get("ports", []) if isinstance(p["port"], str)}


def test_ps_pods_take_grpc_from_anywhere_and_metrics_from_the_cluster() -> None:
    # Prepare / Execute
    ps = _policies({})[("geofed-system", "geofed-geofed-system-ps")]
    # Assert
    for labels, ports in (PS, GROUP_PS, TRAINER):
        assert selects(ps["podSelector"], labels)
        assert {"grpc"} <= ports
    for labels, _ in (SHARD, CLIENT):
        assert not selects(ps["podSelector"], labels)
    assert ps["policyTypes"] == ["Ingress"]  # egress open: a group's ring peers may be in other clusters
    grpc, metrics = ps["ingress"]
    assert "from" not in grpc and _port_names(grpc) == {"grpc"}  # sites dial in over the WAN
    assert metrics["from"] == [{"namespaceSelector": {}}] and _port_names(metrics) == {"metrics"} <= PS[1]


def test_a_shard_takes_grpc_from_the_ps_pods_of_its_namespace_only() -> None:
    shard = _policies({})[("geofed-system", "geofed-geofed-system-ps-shard")]
    assert selects(shard["podSelector"], SHARD[0])
    assert not selects(shard["podSelector"], PS[0])
    (rule,) = shard["ingress"]
    (peer,) = rule["from"]
    assert "namespaceSelector" not in peer  # the front runs in the shard's namespace
    assert selects(peer["podSelector"], PS[0]) and not selects(peer["podSelector"], CLIENT[0])
    assert _port_names(rule) == {"grpc"} <= SHARD[1]


def test_the_operator_reaches_dns_the_api_server_and_the_ps_only() -> None:
    values = {"networkPolicy": {"apiServerCidrs": ["10.0.0.1/32"]}}
    operator = _policies(values)[("geofed-system", "geofed-operator")]
    assert selects(operator["podSelector"], _operator_pod(values))
    assert not selects(operator["podSelector"], PS[0])
    assert operator["policyTypes"] == ["Ingress", "Egress"] and operator["ingress"] == []
    dns, api, to_ps, site_ps = operator["egress"]
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert api == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
                   "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]}  # fmt: skip
    (peer,) = to_ps["to"]
    assert peer["namespaceSelector"] == {}  # Federations live in any watched namespace
    assert selects(peer["podSelector"], PS[0]) and selects(peer["podSelector"], GROUP_PS[0])
    assert not selects(peer["podSelector"], CLIENT[0])
    assert _port_names(to_ps) == {"grpc"} <= PS[1]
    assert site_ps == {"ports": [{"port": 7443, "protocol": "TCP"}]}  # role both: SiteClients' PSs, anywhere


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"role": "site"}, {("geofed-system", "geofed-operator")}),
        ({"role": "cloud", "watchNamespaces": ["ml", "lab"]}, {
            ("geofed-system", "geofed-operator"),
            ("ml", "geofed-geofed-system-ps"), ("ml", "geofed-geofed-system-ps-shard"),
            ("lab", "geofed-geofed-system-ps"), ("lab", "geofed-geofed-system-ps-shard")}),
        ({"networkPolicy": {"enabled": False}}, set()),
    ],
    ids=["site", "cloud-namespaced", "off"],
)  # fmt: skip
def test_which_policies_each_install_renders(values: dict[str, Any], expected: set[tuple[str, str]]) -> None:
    assert set(_policies(values)) == expected


def test_a_site_operator_dials_only_the_site_ps_ports_beyond_dns_and_the_api() -> None:
    operator = _policies({"role": "site", "networkPolicy": {"sitePsPorts": [443, 7443]}})[
        ("geofed-system", "geofed-operator")
    ]
    assert operator["egress"][2:] == [{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 7443, "protocol": "TCP"}]}]


def test_a_proxied_operator_may_dial_its_proxy() -> None:
    values = {"role": "cloud", "proxy": {"httpProxy": "http://proxy.corp:3128", "httpsProxy": "https://tls.proxy"}}
    operator = _policies(values)[("geofed-system", "geofed-operator")]
    assert operator["egress"][3:] == [{"ports": [{"port": 3128, "protocol": "TCP"}]},
                                      {"ports": [{"port": 443, "protocol": "TCP"}]}]  # fmt: skip
