"""Issue 18 part 3 against the real operator and the emulated API server: a Federation with psShards 3 gets
the front and three shards, reports each shard's status, degrades naming a shard that is down, and takes
every child with it when deleted.
"""

from __future__ import annotations

import base64
import json

import pytest

from .conftest import NAMESPACE, operator_running, rolled_out_until, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of
from .test_operator_groups import _command, _condition, _runner, _status

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]

FED = {
    "apiVersion": "geofed.io/v1alpha1",
    "kind": "Federation",
    "metadata": {"name": "demo", "namespace": NAMESPACE},
    "spec": {"psShards": 3, "service": {"type": "LoadBalancer"}},
}
SHARDS = {f"demo-ps-shard-{i}" for i in range(3)}
ALL = {"demo-ps"} | SHARDS


def _shard(index: int, up: bool = True, error: str = "") -> dict:
    address = f"demo-ps-shard-{index}.{NAMESPACE}.svc:7443"
    return {"index": index, "address": address, "up": up, "version": 7, "numel": 10, "instance": f"s{index}",
            "last_error": error}  # fmt: skip


async def test_a_sharded_federation_gets_its_shards_and_reports_them(api, fake_ps) -> None:
    fake_ps.status["shards"] = [_shard(i) for i in range(3)]
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, FED)
        deployments = lambda: names_of(api, "apps/v1/deployments", NAMESPACE)  # noqa: E731
        await wait_for(lambda: deployments() == ALL, what="the front and three shard Deployments")
        await wait_for(lambda: ALL <= names_of(api, "v1/services", NAMESPACE), what="a Service per shard")
        pvcs = {"demo-checkpoints"} | {f"demo-checkpoints-shard-{i}" for i in range(3)}
        await wait_for(lambda: names_of(api, "v1/persistentvolumeclaims", NAMESPACE) == pvcs, what="PVCs")
        await wait_for(lambda: names_of(api, "policy/v1/poddisruptionbudgets", NAMESPACE) == ALL, what="PDBs")
        peer = await wait_for(lambda: get(api, "v1/secrets", NAMESPACE, "demo-peer"), what="the peer secret")
        token = base64.b64decode(peer["data"]["token"]).decode()
        assert len(token) >= 32
        # The token is in that Secret only: not in a Deployment, the ConfigMap, or the Federation's status.
        elsewhere = [get(api, "apps/v1/deployments", NAMESPACE, n) for n in ALL]
        elsewhere += [get(api, "v1/configmaps", NAMESPACE, "demo-config"), _status(api)]
        assert token not in json.dumps(elsewhere)

        front = _command(api, "demo-ps")
        assert front[front.index("--shard-role") + 1] == "front"
        assert front[front.index("--shard-addresses") + 1].split(",") == [_shard(i)["address"] for i in range(3)]
        for i in range(3):
            cmd = _command(api, f"demo-ps-shard-{i}")
            assert cmd[cmd.index("--shard-index") + 1] == str(i) and "--admin-token-file" not in cmd
            svc = get(api, "v1/services", NAMESPACE, f"demo-ps-shard-{i}")
            assert svc["spec"]["type"] == "ClusterIP"  # the front's is a LoadBalancer; shards stay inside
        # Every child is owned by the Federation (what lets the garbage collector take them).
        uid = get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo")["metadata"]["uid"]
        children = [("apps/v1/deployments", n) for n in ALL] + [("v1/services", n) for n in ALL]
        children += [("v1/persistentvolumeclaims", n) for n in pvcs] + [("v1/secrets", "demo-peer")]
        children += [("policy/v1/poddisruptionbudgets", n) for n in ALL]
        for key, name in children:
            refs = get(api, key, NAMESPACE, name)["metadata"]["ownerReferences"]
            assert [r["uid"] for r in refs] == [uid], (key, name)

        # The front alone being ready is not Ready: status names the shard it waits for.
        waits = lambda: "PS shard 0" in _condition(_status(api), "Ready").get("message", "")  # noqa: E731
        await rolled_out_until(api, {"demo-ps"}, waits, what="a Ready condition waiting for shard 0")
        running = lambda: _status(api) if _status(api).get("phase") == "Running" else None  # noqa: E731
        status = await rolled_out_until(api, ALL, running, what="Running once every shard is rolled out")
        assert [(s["index"], s["up"], s["version"]) for s in status["shards"]] == [(i, True, 7) for i in range(3)]

        # The front says shard 1 is down: Degraded, naming it; back up: Running again.
        fake_ps.status["shards"][1] = _shard(1, up=False, error="UNAVAILABLE: connection refused")
        await wait_for(lambda: _condition(_status(api), "Degraded").get("reason") == "ShardDown", what="ShardDown")
        degraded = _condition(_status(api), "Degraded")
        assert "PS shard(s) 1 down" in degraded["message"] and "connection refused" in degraded["message"]
        assert [s["up"] for s in _status(api)["shards"]] == [True, False, True] and _status(api)["shardsUp"] == "2/3"
        fake_ps.status["shards"][1] = _shard(1)
        await wait_for(lambda: _status(api).get("phase") == "Running", what="Running after the shard is back")

        # Deleting the Federation takes the front and every shard with it.
        await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
        await wait_for(lambda: not deployments(), what="Deployments gone")
        await wait_for(lambda: not names_of(api, "v1/services", NAMESPACE), what="Services gone")
        await wait_for(lambda: not names_of(api, "v1/persistentvolumeclaims", NAMESPACE), what="PVCs gone")
        await wait_for(lambda: get(api, "v1/secrets", NAMESPACE, "demo-peer") is None, what="peer secret gone")
    assert runner.exception is None


async def test_shards_with_groups_is_an_invalid_spec_in_status(api, fake_ps) -> None:
    """The settings refuse psShards with groups; the operator says so in status and creates nothing.

    The CRD's CEL rule refuses such a spec on write; one stored before that rule existed (a CRD upgraded
    under existing objects, which the API server does not re-validate) still reaches the operator.
    """
    spec = {"psShards": 2, "groups": [{"name": "us-east"}]}
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        api.seed({**FED, "spec": spec})
        await wait_for(lambda: _condition(_status(api), "Degraded").get("reason") == "InvalidSpec", what="InvalidSpec")
        assert "ps_shards > 1 cannot be combined with PS groups" in _condition(_status(api), "Degraded")["message"]
        assert not names_of(api, "apps/v1/deployments", NAMESPACE)
    assert runner.exception is None
