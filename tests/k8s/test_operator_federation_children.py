"""A Federation's children stay what the spec says, run after run (the real operator against the emulator).

Each test plays one defect of issue 11: children deleted behind the operator's back, retainOnDelete set
after creation, the PVC's size, certificates that expire or are renewed elsewhere, and children that the
API server refuses.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt

import pytest
from kopf.testing import KopfRunner

from geofed_operator import names
from geofed_operator.cloud_builders import FederationObject, build_tls_secret, tls_names
from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings
from geofed_operator.tls import certificate_names, issue_self_signed

from .conftest import NAMESPACE, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of, patch

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]

FED_KEY = "geofed.io/v1alpha1/federations"
FED = {
    "apiVersion": "geofed.io/v1alpha1",
    "kind": "Federation",
    "metadata": {"name": "demo", "namespace": NAMESPACE},
    "spec": {"storage": {"size": "10Gi"}, "service": {"type": "LoadBalancer"}},
}


class Clock:
    """The operator's clock, movable by the test (certificate renewal)."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset


def _runner(fake_ps: FakePS, clock: Clock | None = None) -> KopfRunner:
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory, clock=clock or Clock())
    return KopfRunner(["run", "--standalone", "-A"], registry=build_registry("cloud", deps), timeout=30)


def _status(api: GeofedEmulator) -> dict:
    return (get(api, FED_KEY, NAMESPACE, "demo") or {}).get("status") or {}


def _condition(api: GeofedEmulator, kind: str) -> dict:
    return next((c for c in _status(api).get("conditions") or [] if c["type"] == kind), {})


def _hash(api: GeofedEmulator) -> str:
    dep = get(api, "apps/v1/deployments", NAMESPACE, "demo-ps")
    return dep["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]


def _events(api: GeofedEmulator, reason: str) -> list[dict]:
    return [
        o.raw
        for (resource, ns, _), o in list(api.objects.items())
        if resource.plural == "events" and ns == NAMESPACE and o.raw.get("reason") == reason
    ]


async def _started(api: GeofedEmulator, spec: dict | None = None) -> dict:
    await watches_open(api, {"federations"})
    fed = await create(api, {**FED, "spec": spec or FED["spec"]})
    await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="PS Deployment")
    await wait_for(lambda: get(api, "v1/persistentvolumeclaims", NAMESPACE, "demo-checkpoints"), what="PVC")
    return fed


async def test_deleted_children_come_back_and_metrics_stay_in_cluster(api, fake_ps) -> None:
    """Drift correction: the status timer re-creates a deleted Deployment and Service."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api)
        public = get(api, "v1/services", NAMESPACE, "demo-ps")
        assert [p["name"] for p in public["spec"]["ports"]] == ["grpc"] and public["spec"]["type"] == "LoadBalancer"
        metrics = await wait_for(lambda: get(api, "v1/services", NAMESPACE, "demo-ps-metrics"), what="metrics Svc")
        assert metrics["spec"]["type"] == "ClusterIP" and [p["name"] for p in metrics["spec"]["ports"]] == ["metrics"]
        pdb = await wait_for(lambda: get(api, "policy/v1/poddisruptionbudgets", NAMESPACE, "demo-ps"), what="PDB")
        assert pdb["spec"]["minAvailable"] == 1

        await delete(api, "apps/v1", "Deployment", NAMESPACE, "demo-ps")
        await delete(api, "v1", "Service", NAMESPACE, "demo-ps")
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="Deployment re-created")
        await wait_for(lambda: get(api, "v1/services", NAMESPACE, "demo-ps"), what="Service re-created")
    assert runner.exception is None


async def test_the_load_balancer_address_is_in_status_and_in_the_certificate(api, fake_ps) -> None:
    """Sites dial the load balancer: its address goes to status.publicAddress and into the certificate."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api)
        first = _hash(api)
        ingress = {"loadBalancer": {"ingress": [{"hostname": "lb.example.org"}]}}
        await patch(api, "v1", "Service", NAMESPACE, "demo-ps", {"status": ingress}, status=True)
        await wait_for(lambda: _status(api).get("publicAddress") == "lb.example.org:7443", what="publicAddress")
        secret = get(api, "v1/secrets", NAMESPACE, "demo-tls")
        assert "lb.example.org" in certificate_names(base64.b64decode(secret["data"]["tls.crt"]))
        assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}  # no CA key where sites read ca.crt
        assert _hash(api) != first  # the PS rolled to serve the new certificate
        await wait_for(lambda: _events(api, "CertificateReissued"), what="a CertificateReissued event")
    assert runner.exception is None


async def test_retain_on_delete_set_after_creation_keeps_the_checkpoints(api, fake_ps) -> None:
    """The PVC loses its ownerReference when retainOnDelete turns on, and gets it back when it turns off."""
    async with operator_running(_runner(fake_ps)) as runner:
        fed = await _started(api)
        pvc = lambda: get(api, "v1/persistentvolumeclaims", NAMESPACE, "demo-checkpoints")  # noqa: E731
        assert [r["uid"] for r in pvc()["metadata"]["ownerReferences"]] == [fed["metadata"]["uid"]]

        await patch(
            api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", {"spec": {"storage": {"retainOnDelete": True}}}
        )
        await wait_for(lambda: not pvc()["metadata"].get("ownerReferences"), what="the PVC disowned")
        await wait_for(lambda: _status(api).get("observedGeneration") == 2, what="the change reconciled")
        await asyncio.sleep(0.5)  # a timer pass that started before the change has finished

        await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
        await wait_for(lambda: not names_of(api, "apps/v1/deployments", NAMESPACE), what="PS gone")
        assert pvc() is not None  # the global model survives
    assert runner.exception is None


async def test_storage_grows_on_request_and_refuses_to_shrink(api, fake_ps) -> None:
    """storage.size up -> the PVC request follows; down -> Degraded StorageMismatch, the PVC untouched."""
    pvc = lambda: get(api, "v1/persistentvolumeclaims", NAMESPACE, "demo-checkpoints")  # noqa: E731
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api)
        await patch(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", {"spec": {"storage": {"size": "50Gi"}}})
        await wait_for(lambda: pvc()["spec"]["resources"]["requests"]["storage"] == "50Gi", what="PVC grown")

        await patch(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", {"spec": {"storage": {"size": "5Gi"}}})
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "StorageMismatch", what="Degraded")
        assert "shrink" in _condition(api, "Degraded")["message"]
        assert pvc()["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert runner.exception is None


async def test_the_generated_certificate_is_renewed_before_it_expires(api, fake_ps) -> None:
    """In the last third of its lifetime the certificate is re-issued under the same CA and the PS rolls."""
    clock = Clock()
    async with operator_running(_runner(fake_ps, clock)) as runner:
        await _started(api, {"tls": {"validityDays": 3}})
        first = get(api, "v1/secrets", NAMESPACE, "demo-tls")["data"]["tls.crt"]
        ca = get(api, "v1/secrets", NAMESPACE, "demo-ca")["data"]
        assert set(ca) == {"ca.crt", "ca.key"}
        old_hash = await wait_for(lambda: _hash(api), what="hash")
        clock.offset = dt.timedelta(days=2, hours=1)
        await wait_for(
            lambda: get(api, "v1/secrets", NAMESPACE, "demo-tls")["data"]["tls.crt"] != first, what="renewal"
        )
        assert get(api, "v1/secrets", NAMESPACE, "demo-tls")["data"]["ca.crt"] == ca["ca.crt"]  # sites keep trusting
        await wait_for(lambda: _hash(api) != old_hash, what="PS rolled")
        await wait_for(lambda: _events(api, "CertificateRenewed"), what="a CertificateRenewed event")
    assert runner.exception is None


async def test_a_renewed_named_tls_secret_rolls_the_ps(api, fake_ps) -> None:
    """spec.tlsSecretName (e.g. cert-manager's): a new certificate in it rolls the PS."""
    parsed = FederationObject.from_body(FED | {"spec": {}}, "img")

    def tls_secret(material) -> dict:
        secret = build_tls_secret(parsed, material, tls_names(parsed))
        secret["metadata"] = {"name": "managed-tls", "namespace": NAMESPACE}
        return secret

    await create(api, tls_secret(issue_self_signed(["demo-ps.geofed-test.svc"])))
    async with operator_running(_runner(fake_ps)) as runner:
        await _started(api, {"tlsSecretName": "managed-tls"})
        old_hash = await wait_for(lambda: _hash(api), what="hash")
        renewed = tls_secret(issue_self_signed(["demo-ps.geofed-test.svc"]))
        await patch(api, "v1", "Secret", NAMESPACE, "managed-tls", {"data": renewed["data"]})
        await wait_for(lambda: _hash(api) != old_hash, what="PS rolled to the renewed certificate")
    assert runner.exception is None


async def test_a_child_the_api_server_refuses_shows_as_degraded_with_its_reason(api, fake_ps) -> None:
    """A quota refusing the Deployment: Degraded ChildRejected with the API server's message, and an Event."""
    api.refuse("deployments", "exceeded quota: compute, requested: requests.cpu=2, limited: requests.cpu=1")
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, FED)
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "ChildRejected", what="Degraded")
        message = _condition(api, "Degraded")["message"]
        assert "Deployment 'demo-ps'" in message and "exceeded quota" in message
        assert _status(api)["phase"] == "Degraded"
        await wait_for(lambda: _events(api, "ChildRejected"), what="a ChildRejected event")

        api.allow("deployments")  # the quota is raised: the timer creates it without a spec change
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="Deployment created")
    assert runner.exception is None
