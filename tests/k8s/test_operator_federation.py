"""The real operator (kopf) against the emulated API server: a Federation becomes a running PS."""

from __future__ import annotations

import asyncio

import pytest
from kopf.testing import KopfRunner

from geofed_operator import names
from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import (
    NAMESPACE,
    FakeAdminError,
    FakePS,
    operator_running,
    rolled_out_until,
    wait_for,
    watches_open,
)
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of, patch

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]

FED = {
    "apiVersion": "geofed.io/v1alpha1",
    "kind": "Federation",
    "metadata": {"name": "demo", "namespace": NAMESPACE},
    "spec": {"aggregation": {"mode": "sync", "globalLr": 0.7}, "server": {"tokenTTLSeconds": 600}},
}


def _runner(role: str, fake_ps: FakePS) -> KopfRunner:
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory)
    return KopfRunner(["run", "--standalone", "-A"], registry=build_registry(role, deps), timeout=30)


async def test_federation_creates_owned_children_and_reports_ps_status(api, fake_ps) -> None:
    """Create -> Deployment/Service/PVC/ConfigMap/Secrets owned by the Federation; status from the PS."""
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        fed = await create(api, FED)
        uid = fed["metadata"]["uid"]
        dep = await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="PS Deployment")
        for key, name in [
            ("v1/services", "demo-ps"),
            ("v1/persistentvolumeclaims", "demo-checkpoints"),
            ("v1/configmaps", "demo-config"),
            ("v1/secrets", "demo-admin"),
            ("v1/secrets", "demo-tls"),
        ]:
            child = await wait_for(lambda k=key, n=name: get(api, k, NAMESPACE, n), what=f"{key}/{name}")
            refs = child["metadata"]["ownerReferences"]
            assert [(r["kind"], r["name"], r["uid"], r["controller"]) for r in refs] == [
                ("Federation", "demo", uid, True)
            ]
        assert dep["spec"]["strategy"] == {"type": "Recreate"}
        assert "--token-ttl-s" in dep["spec"]["template"]["spec"]["containers"][0]["command"]
        config = get(api, "v1/configmaps", NAMESPACE, "demo-config")["data"]["federation.yaml"]
        assert "global_lr: 0.7" in config and "mode: sync" in config

        # No controller runs here: the PS pod is "ready" when the test says so.
        status = await wait_for(
            lambda: (
                (get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo") or {}).get("status", {}).get("phase")
            ),
            what="a phase",
        )
        assert status == "Progressing"

        def running():
            st = get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo")["status"]
            return st if st.get("phase") == "Running" else None

        # Ready means the *current* template is rolled out: the operator may re-apply the Deployment meanwhile.
        st = await rolled_out_until(api, {"demo-ps"}, running, what="phase Running")
        assert (st["version"], st["connectedClients"], st["trainLoss"]) == (7, 2, 3.25)
        assert {c["type"]: c["status"] for c in st["conditions"]} == {
            "Ready": "True",
            "Progressing": "False",
            "Degraded": "False",
        }
        assert "self-signed" in st["tlsNote"]
        # The operator polled the in-cluster Service name with the admin credential it generated.
        address, method = fake_ps.calls[-1]
        assert (address, method) == (f"demo-ps.{NAMESPACE}.svc:7443", "status")

        # A spec change rewrites federation.yaml and rolls the PS (Recreate: it checkpoints on SIGTERM first).
        old_hash = dep["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]
        await patch(
            api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", {"spec": {"aggregation": {"globalLr": 0.5}}}
        )

        def rolled():
            d = get(api, "apps/v1/deployments", NAMESPACE, "demo-ps")
            return (
                d
                if d["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH] != old_hash
                else None
            )

        dep = await wait_for(rolled, what="a rolled PS Deployment")
        assert "global_lr: 0.5" in get(api, "v1/configmaps", NAMESPACE, "demo-config")["data"]["federation.yaml"]
        new_hash = dep["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]

        def rolled_out():
            st = get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo")["status"]
            return st if st["configHash"] == new_hash else None

        st = await wait_for(rolled_out, what="status of the rolled config")
        assert st["observedGeneration"] == 2
        # Until the new pod is ready the federation is Progressing; then Running again.
        await wait_for(lambda: running() is None, what="phase Progressing during the roll")
        await rolled_out_until(api, {"demo-ps"}, running, what="phase Running after the roll")

        # An unreachable PS is a readable Degraded condition, not a crash.
        fake_ps.error = FakeAdminError("UNAVAILABLE", "connection refused")

        def degraded():
            st = get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo")["status"]
            return st if st.get("phase") == "Degraded" else None

        st = await wait_for(degraded, what="phase Degraded")
        cond = next(c for c in st["conditions"] if c["type"] == "Degraded")
        assert cond["reason"] == "PSUnreachable" and "connection refused" in cond["message"]

        # Deleting the Federation removes everything it owns (ownerReferences -> garbage collector).
        await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
        await wait_for(lambda: not names_of(api, "apps/v1/deployments", NAMESPACE), what="Deployment gone")
        assert not names_of(api, "v1/secrets", NAMESPACE)
        assert not names_of(api, "v1/persistentvolumeclaims", NAMESPACE)
        await asyncio.sleep(0.3)
    assert runner.exception is None
