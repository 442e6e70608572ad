"""`examples/federation.yaml` and `examples/site.yaml`, verbatim, through the real operator (issue 9, item 8).

Their schema validity is tested in test_crds.py; here they are applied to the emulated API server as
`kubectl apply -f` would and the operator (role both) must turn them into a PS and a client Job.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from .conftest import operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, get
from .test_operator_federation import _runner

REPO = Path(__file__).resolve().parents[2]


def example(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_the_examples_become_a_ps_and_a_master_client(api, fake_ps) -> None:
    """federation.yaml -> PS that names the master; site.yaml -> the master's Job with a minted token."""
    async with operator_running(_runner("both", fake_ps)) as runner:
        await watches_open(api, {"federations", "siteclients"})
        for doc in example("federation.yaml"):
            await create(api, doc)
        dep = await wait_for(lambda: get(api, "apps/v1/deployments", "default", "gpt2-demo-ps"), what="PS")
        command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--master-client-id") + 1] == "uw-madison.uw-madison-client"
        svc = get(api, "v1/services", "default", "gpt2-demo-ps")
        assert svc["spec"]["type"] == "LoadBalancer" and [p["port"] for p in svc["spec"]["ports"]] == [7443]

        for doc in example("site.yaml"):
            await create(api, doc)
        job = await wait_for(lambda: get(api, "batch/v1/jobs", "default", "uw-madison-client-1"), what="Job")
        assert fake_ps.tokens[0][1:] == (
            "uw-madison.uw-madison-client",
            "REPLACE-WITH-THE-CREDENTIAL-FROM-geofed-site-enroll",
        )
        token = get(api, "v1/secrets", "default", "uw-madison-client-token-1")["data"]["token"]
        assert base64.b64decode(token).decode() == fake_ps.tokens[0][0]
        pod = job["spec"]["template"]["spec"]
        assert pod["containers"][0]["command"][:4] == ["torchrun", "--standalone", "--nproc-per-node", "2"]
        assert {t["key"] for t in pod["tolerations"]} == {"preemptible", "nvidia.com/gpu"}  # its own + GPU taint
    assert runner.exception is None


def test_the_network_policy_example_fits_the_example_federation() -> None:
    """It selects the PS pod the operator builds and opens exactly its gRPC port and, narrowly, metrics."""
    from geofed_operator.cloud_builders import FederationObject, build_ps_deployment

    (fed_doc,) = example("federation.yaml")
    (policy,) = example("networkpolicy.yaml")
    fed = FederationObject.from_body(fed_doc, "img")
    pod = build_ps_deployment(fed, config_hash="x")["spec"]["template"]
    assert policy["metadata"]["namespace"] == fed.namespace
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    grpc, metrics = policy["spec"]["ingress"]
    assert [p["port"] for p in grpc["ports"]] == [fed.spec.service.port] and "from" not in grpc
    assert [p["port"] for p in metrics["ports"]] == [fed.spec.service.metrics_port] and metrics["from"]
