"""The real operator (kopf) against the emulated API server: a SiteClient's launch, preemption, cleanup."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

import pytest
from kopf.testing import KopfRunner

from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, FakeAdminError, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of, patch

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]

CREDENTIAL = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "uw-credential", "namespace": NAMESPACE},
    "type": "Opaque",
    "data": {"credential": base64.b64encode(b"site-secret-uw").decode()},
}
SITECLIENT = {
    "apiVersion": "geofed.io/v1alpha1",
    "kind": "SiteClient",
    "metadata": {"name": "gpu0", "namespace": NAMESPACE},
    "spec": {
        "federation": "demo",
        "site": "uw",
        "psAddress": "ps.example.org:7443",
        "credentialSecretRef": {"name": "uw-credential"},
        "insecure": True,
        "gpusPerPod": 2,
        "data": {"pvc": {"claimName": "uw-data"}},
        "backoff": {"initialSeconds": 0.5, "maxSeconds": 1},
    },
}
SC_KEY = "geofed.io/v1alpha1/siteclients"


def _runner(fake_ps: FakePS) -> KopfRunner:
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory)
    return KopfRunner(["run", "--standalone", "-A"], registry=build_registry("site", deps), timeout=30)


def _status(api: GeofedEmulator) -> dict:
    return (get(api, SC_KEY, NAMESPACE, "gpu0") or {}).get("status") or {}


def _token_of(api: GeofedEmulator, attempt: int) -> str:
    secret = get(api, "v1/secrets", NAMESPACE, f"gpu0-token-{attempt}")
    return base64.b64decode(secret["data"]["token"]).decode()


async def test_siteclient_launches_relaunches_after_eviction_and_cleans_up(api, fake_ps) -> None:
    """Token Secret + Job; an evicted pod -> a new Job with a new token; delete -> nothing left."""
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)

        # Attempt 1: a token minted with the site credential for <site>.<name>, in its own Secret.
        job1 = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job of attempt 1")
        assert fake_ps.tokens[0][1:] == ("uw.gpu0", "site-secret-uw")
        assert _token_of(api, 1) == fake_ps.tokens[0][0]
        pod_spec = job1["spec"]["template"]["spec"]
        assert job1["spec"]["backoffLimit"] == 0 and pod_spec["restartPolicy"] == "Never"
        assert pod_spec["containers"][0]["command"][:4] == ["torchrun", "--standalone", "--nproc-per-node", "2"]
        assert job1["metadata"]["ownerReferences"][0]["kind"] == "SiteClient"
        await wait_for(lambda: _status(api).get("phase") == "Launching", what="phase Launching")

        # No kubelet here: the test plays the pod, first running, then evicted.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "gpu0-1-abcde",
                "namespace": NAMESPACE,
                "labels": job1["spec"]["template"]["metadata"]["labels"],
            },
            "spec": pod_spec,
        }
        await create(api, pod)
        await patch(api, "v1", "Pod", NAMESPACE, "gpu0-1-abcde", {"status": {"phase": "Running"}}, status=True)
        await wait_for(lambda: _status(api).get("phase") == "Running", what="phase Running")
        assert _status(api).get("lastSyncTime"), "the PS's last-seen time is reported"
        evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
        await patch(api, "v1", "Pod", NAMESPACE, "gpu0-1-abcde", {"status": evicted}, status=True)

        # Attempt 2: a new Job with a new token, after a backoff; the consumed token's Secret is gone.
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
        assert len(fake_ps.tokens) == 2 and _token_of(api, 2) == fake_ps.tokens[1][0] != fake_ps.tokens[0][0]
        await wait_for(lambda: get(api, "v1/secrets", NAMESPACE, "gpu0-token-1") is None, what="old token dropped")
        st = await wait_for(lambda: _status(api) if _status(api).get("attempt") == 2 else None, what="attempt 2")
        assert (st["attempt"], st["restarts"], st["lastFailureReason"]) == (2, 1, "Evicted")

        # A PS that refuses the credential (revoked) is a readable Degraded condition, retried.
        fake_ps.error = FakeAdminError("UNAUTHENTICATED", "unknown or revoked credential")
        await patch(api, "batch/v1", "Job", NAMESPACE, "gpu0-2", {"status": {"conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "pod failed"}]}},
            status=True)  # fmt: skip
        await wait_for(lambda: _status(api).get("phase") == "Degraded", what="phase Degraded")
        degraded = next(c for c in _status(api)["conditions"] if c["type"] == "Degraded")
        assert degraded["reason"] == "CredentialRejected" and "revoked" in degraded["message"]
        fake_ps.error = None
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-3"), what="Job of attempt 3")

        # Deleting the SiteClient stops its Jobs and drops its tokens (finalizer), then it is gone.
        await delete(api, "geofed.io/v1alpha1", "SiteClient", NAMESPACE, "gpu0")
        await wait_for(lambda: get(api, SC_KEY, NAMESPACE, "gpu0") is None, what="SiteClient gone")
        assert not names_of(api, "batch/v1/jobs", NAMESPACE)
        assert names_of(api, "v1/secrets", NAMESPACE) == {"uw-credential"}
    assert runner.exception is None


async def test_missing_credential_secret_is_degraded_not_a_crash(api, fake_ps) -> None:
    """Without the site credential Secret nothing launches; status says which Secret is missing."""
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, SITECLIENT)
        await wait_for(lambda: _status(api).get("phase") == "Degraded", what="phase Degraded")
        cond = next(c for c in _status(api)["conditions"] if c["type"] == "Degraded")
        assert cond["reason"] == "SecretMissing" and "'uw-credential'" in cond["message"]
        assert not names_of(api, "batch/v1/jobs", NAMESPACE) and fake_ps.tokens == []
        await create(api, CREDENTIAL)  # applying the site.yaml fixes it without a restart
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job after the Secret appears")
    assert runner.exception is None


async def test_operator_command_runs_kopf_and_reports_an_unreachable_ps(api, tmp_path) -> None:
    """`python -m geofed_operator operator --role site` (the image's entry point) end to end, as a process."""
    env = {
        **os.environ,
        "KUBECONFIG": os.environ["KUBECONFIG"],
        "GEOFED_OPERATOR_SITE_INTERVAL_S": "0.3",
        "GEOFED_OPERATOR_ADMIN_TIMEOUT_S": "1",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "geofed_operator", "operator", "--role", "site", "--all-namespaces",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        await watches_open(api, {"siteclients"}, timeout=60)
        await create(api, CREDENTIAL)
        await create(api, {**SITECLIENT, "spec": {**SITECLIENT["spec"], "psAddress": "127.0.0.1:1"}})
        await wait_for(lambda: _status(api).get("phase") == "Degraded", timeout=30, what="phase Degraded")
        cond = next(c for c in _status(api)["conditions"] if c["type"] == "Degraded")
        assert cond["reason"] == "PSUnreachable" and "127.0.0.1:1" in cond["message"]
    finally:
        proc.terminate()
        output, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, output.decode()[-2000:]
