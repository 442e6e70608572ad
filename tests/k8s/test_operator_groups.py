"""Issue 13 against the real operator and the emulated API server: one PS per group, the split trainer,
per-group status, drift correction and deletion of the per-group children, and a SiteClient's group.
"""

from __future__ import annotations

import base64

import pytest
import yaml
from kopf.testing import KopfRunner

from geofed.config import FederationConfig
from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, FakePS, operator_running, rolled_out_until, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of, patch
from .test_operator_siteclient import CREDENTIAL, SC_KEY, SITECLIENT

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]

FED_KEY = "geofed.io/v1alpha1/federations"
GROUPS = [{"name": "us-east"}, {"name": "eu-west"}]
FED = {
    "apiVersion": "geofed.io/v1alpha1",
    "kind": "Federation",
    "metadata": {"name": "demo", "namespace": NAMESPACE},
    "spec": {"groups": GROUPS, "paradigm": {"name": "fsl-sage", "cutLayer": 1}, "service": {"type": "LoadBalancer"}},
}
PS = {"demo-ps-us-east", "demo-ps-eu-west"}


def _runner(role: str, fake_ps: FakePS) -> KopfRunner:
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory)
    return KopfRunner(["run", "--standalone", "-A"], registry=build_registry(role, deps), timeout=30)


def _status(api: GeofedEmulator, key: str = FED_KEY, name: str = "demo") -> dict:
    return (get(api, key, NAMESPACE, name) or {}).get("status") or {}


def _condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def _command(api: GeofedEmulator, name: str) -> list[str]:
    return get(api, "apps/v1/deployments", NAMESPACE, name)["spec"]["template"]["spec"]["containers"][0]["command"]




def _ps_status(version: int, members: list[str]) -> dict:
    return {"version": version, "ring_allreduces": version, "ring_members": members}


async def test_groups_get_a_ps_each_the_trainer_and_per_group_status(api, fake_ps) -> None:
    """Two groups + fsl-sage: two PSs (own PVC, --group, peer secret), a trainer; status per group; drift; delete."""
    both = ["eu-west", "us-east"]
    fake_ps.by_address = {
        f"demo-ps-us-east.{NAMESPACE}.svc:7443": _ps_status(9, both),
        f"demo-ps-eu-west.{NAMESPACE}.svc:7443": _ps_status(8, both),
    }
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, FED)
        deployments = lambda: names_of(api, "apps/v1/deployments", NAMESPACE)  # noqa: E731
        await wait_for(lambda: deployments() == PS | {"demo-trainer"}, what="two PSs and the trainer")
        assert {"demo-ps-us-east", "demo-ps-eu-west", "demo-trainer"} <= names_of(api, "v1/services", NAMESPACE)
        assert "demo-ps" not in names_of(api, "v1/services", NAMESPACE)
        await wait_for(
            lambda: (
                {"demo-checkpoints-us-east", "demo-checkpoints-eu-west", "demo-trainer-state"}
                <= names_of(api, "v1/persistentvolumeclaims", NAMESPACE)
            ),
            what="a PVC per PS and the trainer's",
        )
        peer = await wait_for(lambda: get(api, "v1/secrets", NAMESPACE, "demo-peer"), what="the peer secret")
        token = peer["data"]["token"]
        assert len(base64.b64decode(token)) >= 32
        for group in ("us-east", "eu-west"):
            cmd = _command(api, f"demo-ps-{group}")
            assert cmd[cmd.index("--group") + 1] == group and "--peer-token-file" in cmd
        trainer = _command(api, "demo-trainer")
        assert trainer[:3] == ["python", "-m", "client_agent.split.trainer"]
        assert trainer[trainer.index("--ps") + 1] == f"demo-ps-us-east.{NAMESPACE}.svc:7443"
        # What the PSs load: each group's in-cluster address, the trainer's address for clients.
        config_map = get(api, "v1/configmaps", NAMESPACE, "demo-config")
        config = FederationConfig.model_validate(yaml.safe_load(config_map["data"]["federation.yaml"]))
        wanted = [f"demo-ps-{g}.{NAMESPACE}.svc:7443" for g in ("us-east", "eu-west")]
        assert [g.address for g in config.groups] == wanted
        assert config.paradigm.trainer == f"demo-trainer.{NAMESPACE}.svc:7450"

        # Until every group's PS is ready, status says which one it waits for.
        waits = lambda: "group eu-west" in _condition(_status(api), "Ready").get("message", "")  # noqa: E731
        await rolled_out_until(api, {"demo-ps-us-east"}, waits, what="a Ready condition waiting for eu-west")
        status = await rolled_out_until(
            api, PS, lambda: _status(api) if _status(api).get("groupVersions") == "us-east=9,eu-west=8" else None,
            what="per-group versions",
        )  # fmt: skip
        assert status["phase"] == "Running" and status["version"] == 8
        east = next(g for g in status["groups"] if g["name"] == "us-east")
        assert (east["ringAllreduces"], east["ringMembers"]) == (9, both)
        assert {a for a, m in fake_ps.calls if m == "status"} == set(fake_ps.by_address)

        # Each group's load balancer is its sites' address (their `geofed site enroll --ps-address`).
        ingress = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}
        await patch(api, "v1", "Service", NAMESPACE, "demo-ps-eu-west", {"status": ingress}, status=True)
        west = lambda: next(g for g in _status(api)["groups"] if g["name"] == "eu-west")  # noqa: E731
        # The certificate now covers the new address, so both PSs roll to serve it.
        await rolled_out_until(api, PS, lambda: west().get("publicAddress") == "203.0.113.9:7443", what="address")
        assert "publicAddress" not in next(g for g in _status(api)["groups"] if g["name"] == "us-east")

        # A PS the others left out of their ring: Degraded, naming the group.
        fake_ps.by_address[f"demo-ps-us-east.{NAMESPACE}.svc:7443"]["ring_members"] = ["us-east"]
        await wait_for(lambda: _condition(_status(api), "Degraded").get("reason") == "RingMemberExcluded",
                       what="RingMemberExcluded")  # fmt: skip
        assert "eu-west" in _condition(_status(api), "Degraded")["message"]

        # Drift: a deleted group PS, its Service and the trainer come back; the peer secret is kept.
        await delete(api, "apps/v1", "Deployment", NAMESPACE, "demo-ps-eu-west")
        await delete(api, "v1", "Service", NAMESPACE, "demo-ps-eu-west")
        await delete(api, "apps/v1", "Deployment", NAMESPACE, "demo-trainer")
        await wait_for(lambda: deployments() == PS | {"demo-trainer"}, what="Deployments re-created")
        await wait_for(lambda: get(api, "v1/services", NAMESPACE, "demo-ps-eu-west"), what="Service re-created")
        assert get(api, "v1/secrets", NAMESPACE, "demo-peer")["data"]["token"] == token

        # Deleting the Federation takes every per-group child with it.
        await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
        await wait_for(lambda: not deployments(), what="Deployments gone")
        await wait_for(lambda: not names_of(api, "v1/persistentvolumeclaims", NAMESPACE), what="PVCs gone")
        await wait_for(lambda: get(api, "v1/secrets", NAMESPACE, "demo-peer") is None, what="peer secret gone")
    assert runner.exception is None


async def test_a_federation_without_groups_keeps_the_single_ps(api, fake_ps) -> None:
    """No groups, no fsl-sage: demo-ps only, no peer secret, no trainer, no group status."""
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, {**FED, "spec": {}})
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="the PS")
        running = lambda: _status(api) if _status(api).get("phase") == "Running" else None  # noqa: E731
        status = await rolled_out_until(api, {"demo-ps"}, running, what="Running")
        assert names_of(api, "apps/v1/deployments", NAMESPACE) == {"demo-ps"}
        assert get(api, "v1/secrets", NAMESPACE, "demo-peer") is None and "--group" not in _command(api, "demo-ps")
        assert "groups" not in status and "groupVersions" not in status
    assert runner.exception is None


async def test_a_siteclient_group_is_passed_and_a_join_refusal_is_degraded(api, fake_ps) -> None:
    """spec.group -> --group with the group's PS address; the PS refusing the group at Join -> Degraded."""
    spec = {**SITECLIENT["spec"], "group": "mars", "psAddress": "ps-mars.example.org:7443"}
    async with operator_running(_runner("site", fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, {**SITECLIENT, "spec": spec})
        job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job of attempt 1")
        cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
        assert cmd[cmd.index("--group") + 1] == "mars" and cmd[cmd.index("--ps") + 1] == "ps-mars.example.org:7443"
        assert fake_ps.calls[0] == ("ps-mars.example.org:7443", "create_token")

        said = ("geofed client: the parameter server refused this client: unknown PS group 'mars'; this "
                "federation's groups are: us-east, eu-west")  # fmt: skip
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu0-1-abcde", "namespace": NAMESPACE,
                         "labels": job["spec"]["template"]["metadata"]["labels"]},
            "spec": job["spec"]["template"]["spec"],
        }  # fmt: skip
        await create(api, pod)
        failed = {"phase": "Failed", "containerStatuses": [{"name": "client", "state": {"terminated": {
            "exitCode": 3, "reason": "Error", "message": said}}}]}  # fmt: skip
        await patch(api, "v1", "Pod", NAMESPACE, "gpu0-1-abcde", {"status": failed}, status=True)
        await patch(api, "batch/v1", "Job", NAMESPACE, "gpu0-1", {"status": {"failed": 1, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "pod failed"}]}},
            status=True)  # fmt: skip
        status = await wait_for(
            lambda: _status(api, SC_KEY, "gpu0") if _status(api, SC_KEY, "gpu0").get("phase") == "Degraded" else None,
            what="Degraded",
        )
        degraded = _condition(status, "Degraded")
        assert degraded["status"] == "True" and degraded["reason"] == "JoinRefused"
        assert "unknown PS group 'mars'" in degraded["message"]
    assert runner.exception is None
