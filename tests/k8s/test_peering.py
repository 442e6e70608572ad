"""Two operator replicas (chart `replicas: 2`): kopf peering lets one serve while the other stands by."""

from __future__ import annotations

import asyncio

import pytest
from kopf.testing import KopfRunner

from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, get
from .test_chart import render
from .test_operator_siteclient import CREDENTIAL, SITECLIENT


def _replica(fake_ps: FakePS, priority: int) -> KopfRunner:
    settings = OperatorSettings(site_interval_s=0.3, admin_timeout_s=2)
    registry = build_registry("site", Deps(settings=settings, admin_factory=fake_ps.factory))
    args = ["run", "-A", "--peering", "geofed", "--priority", str(priority)]
    return KopfRunner(args, registry=registry, timeout=30)


async def both_peered(api: GeofedEmulator) -> None:
    """Both replicas are in the peering record, and the lower one has had time to read it and pause.

    A replica that starts alone serves at once (kopf's peering is priorities, not a lease), so a
    SiteClient created while only the lower replica has registered may be launched by it."""
    await wait_for(
        lambda: len((get(api, "kopf.dev/v1/clusterkopfpeerings", None, "geofed") or {}).get("status") or {}) >= 2,
        what="both replicas in the peering record",
    )
    await asyncio.sleep(1.0)


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_two_replicas_never_both_launch(api) -> None:
    """The lower-priority replica pauses: one token, one Job, whichever replica holds the higher priority."""
    peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "geofed"}}
    async with api.post("/apis/kopf.dev/v1/clusterkopfpeerings", json=peering) as resp:
        assert resp.status < 300, await resp.text()
    serving, standby = FakePS(), FakePS()
    async with operator_running(_replica(serving, 200)) as first, operator_running(_replica(standby, 100)) as second:
        await watches_open(api, {"siteclients"})
        await both_peered(api)
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job 1")
        await asyncio.sleep(1.5)
        assert len(serving.tokens) == 1 and standby.tokens == []
    assert first.exception is None and second.exception is None


def test_chart_with_two_replicas_peers_them() -> None:
    """replicas: 2 -> --peering, a peering record per watched namespace, RBAC on it; kinds ship in crds/."""
    docs = render({"replicas": 2, "role": "site", "watchNamespaces": ["lab-a"]})
    dep = next(d for d in docs if d["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert dep["spec"]["replicas"] == 2 and "--peering=geofed-geofed-system" in args  # release name and namespace
    peering = [d for d in docs if d["kind"] == "KopfPeering"]
    assert [(p["metadata"]["name"], p["metadata"]["namespace"]) for p in peering] == [("geofed-geofed-system", "lab-a")]
    role = next(d for d in docs if d["kind"] == "Role")
    assert any(r["apiGroups"] == ["kopf.dev"] and r["resources"] == ["kopfpeerings"] for r in role["rules"])
    single = render({"role": "site"})
    assert not [d for d in single if d["kind"].endswith("KopfPeering")]
    assert "--peering" not in " ".join(
        next(d for d in single if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    )
