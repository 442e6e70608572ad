"""A SiteClient's attempts against the real operator and the emulated API server: one pod per client id,
at most one token per attempt, Job-like conditions at the end, and suspension.

Pods are played by the test as a real API server holds them: a deleted pod keeps existing, with
`metadata.deletionTimestamp` set and phase Running, until its kubelet has stopped the containers and the
Job controller has dropped its `batch.kubernetes.io/job-tracking` finalizer.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest
from kopf.testing import KopfRunner

from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.kube import Kube, KubeError
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, names_of, patch
from .test_operator_siteclient import CREDENTIAL, SITECLIENT, _runner, _status

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
JOB_TRACKING = "batch.kubernetes.io/job-tracking"  # the Job controller's finalizer on its pods


def _condition(api: GeofedEmulator, kind: str) -> dict:
    return next((c for c in _status(api).get("conditions") or [] if c["type"] == kind), {})


async def _terminating_pod(api: GeofedEmulator, attempt: int) -> str:
    """The attempt's pod, preempted: DisruptionTarget set, deletionTimestamp set, containers still running."""
    job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, f"gpu0-{attempt}"), what=f"Job {attempt}")
    name = f"gpu0-{attempt}-abcde"
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": job["spec"]["template"]["metadata"]["labels"],
            "finalizers": [JOB_TRACKING],
        },
        "spec": job["spec"]["template"]["spec"],
    }
    await create(api, pod)
    target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
              "message": "Preempted in order to admit critical pod"}  # fmt: skip
    running = {"name": "client", "state": {"running": {"startedAt": now}}}
    status = {"phase": "Running", "conditions": [target], "containerStatuses": [running]}
    await patch(api, "v1", "Pod", NAMESPACE, name, {"status": status}, status=True)
    await delete(api, "v1", "Pod", NAMESPACE, name)  # the scheduler's delete: the finalizer holds it, Terminating
    assert get(api, "v1/pods", NAMESPACE, name)["metadata"]["deletionTimestamp"]
    return name


async def _launched_and_preempted(api: GeofedEmulator) -> str:
    """The SiteClient applied once the operator watches; its first pod preempted and still stopping."""
    await watches_open(api, {"siteclients"})
    await create(api, CREDENTIAL)
    await create(api, SITECLIENT)
    return await _terminating_pod(api, 1)


async def test_a_preempted_clients_next_attempt_waits_for_its_old_pod(api, fake_ps) -> None:
    """Preempted with a 60 s grace period: no second Job (pod, token) for uw.gpu0 until the old pod is gone."""
    async with operator_running(_runner(fake_ps)) as runner:
        old_pod = await _launched_and_preempted(api)
        await wait_for(lambda: _status(api).get("lastFailureReason") == "PreemptionByScheduler", what="preempted")
        # The backoff (0.5-1 s) runs out while the pod is still stopping: several ticks must not launch.
        await asyncio.sleep(2.0)
        assert get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2") is None, "two pods would share uw.gpu0 and its PVC"
        assert len(fake_ps.tokens) == 1, "no token for an attempt that cannot start"
        progressing = _condition(api, "Progressing")
        assert progressing["reason"] == "WaitingForPreviousPod" and old_pod in progressing["message"]

        # The kubelet has stopped it; the Job controller drops its finalizer; the pod is removed.
        await patch(api, "v1", "Pod", NAMESPACE, old_pod, {"metadata": {"finalizers": []}})
        assert get(api, "v1/pods", NAMESPACE, old_pod) is None
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
        await wait_for(lambda: _status(api).get("attempt") == 2, what="status of attempt 2")
        assert len(fake_ps.tokens) == 2 and _status(api)["restarts"] == 1
    assert runner.exception is None


async def test_a_stopped_but_not_yet_removed_pod_does_not_hold_the_next_attempt(api, fake_ps) -> None:
    """A pod whose containers have terminated (phase Failed) may still be listed: the next attempt may start."""
    async with operator_running(_runner(fake_ps)) as runner:
        old_pod = await _launched_and_preempted(api)
        done = {"name": "client", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}
        await patch(api, "v1", "Pod", NAMESPACE, old_pod, {"status": {"phase": "Failed",
                    "containerStatuses": [done]}}, status=True)  # fmt: skip
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
    assert runner.exception is None


async def test_a_refused_token_secret_mints_no_token_and_says_why(api, fake_ps) -> None:
    """A quota on count/secrets: Degraded with the API server's message, no token minted over many ticks."""
    quota = ('secrets "gpu0-token-1" is forbidden: exceeded quota: objects, requested: count/secrets=1, '
             "used: count/secrets=10, limited: count/secrets=10")  # fmt: skip
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)  # created before the quota is full
        api.refuse("secrets", quota)
        await create(api, SITECLIENT)
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "SecretRejected", what="SecretRejected")
        assert "exceeded quota" in _condition(api, "Degraded")["message"] and _status(api)["phase"] == "Degraded"
        await asyncio.sleep(1.5)  # several ticks
        assert fake_ps.tokens == [], "a token minted for a Secret that cannot be stored is wasted (one per tick)"

        api.allow("secrets")  # the quota raised: the attempt starts with a single token
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="the Job once allowed")
        assert len(fake_ps.tokens) == 1
    assert runner.exception is None


async def test_a_name_too_long_for_labels_is_refused_and_mints_nothing(api, fake_ps) -> None:
    """A 64-character SiteClient name cannot label its children: the API server refuses it (the CRD's CEL rule),
    and one stored before that rule existed gets no token, Job or Secret from the operator."""
    long_name = "g" * 64
    body = {**SITECLIENT, "metadata": {**SITECLIENT["metadata"], "name": long_name, "namespace": NAMESPACE}}
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        async with api.post(f"/apis/geofed.io/v1alpha1/namespaces/{NAMESPACE}/siteclients", json=body) as resp:
            assert resp.status == 422 and "at most 63 characters" in await resp.text()
        api.seed(body)  # as if it predated the rule: a real API server then refuses even its status writes
        await asyncio.sleep(1.5)  # several ticks
        assert fake_ps.tokens == []
        assert not names_of(api, "batch/v1/jobs", NAMESPACE) and names_of(api, "v1/secrets", NAMESPACE) == {
            "uw-credential"
        }
    assert runner.exception is None


async def _pod_in(api: GeofedEmulator, attempt: int, phase: str) -> str:
    """Play the Job controller and the kubelet: the attempt's pod, in `phase`."""
    job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, f"gpu0-{attempt}"), what=f"Job {attempt}")
    name = f"gpu0-{attempt}-fghij"
    meta = {"name": name, "namespace": NAMESPACE, "labels": job["spec"]["template"]["metadata"]["labels"]}
    await create(api, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": job["spec"]["template"]["spec"]})
    await patch(api, "v1", "Pod", NAMESPACE, name, {"status": {"phase": phase}}, status=True)
    return name


async def test_a_finished_siteclient_has_a_complete_condition_and_times(api, fake_ps) -> None:
    """Succeeded: condition Complete=True (what `kubectl wait --for=condition=Complete` reads), start and end."""
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        await _pod_in(api, 1, "Succeeded")
        await wait_for(lambda: _condition(api, "Complete").get("status") == "True", what="Complete=True")
        st = _status(api)
        assert st["phase"] == "Succeeded" and "Failed" not in {c["type"] for c in st["conditions"]}
        assert st["startTime"] <= st["completionTime"]
    assert runner.exception is None


async def test_a_siteclient_that_gives_up_has_a_failed_condition(api, fake_ps) -> None:
    """backoff.maxRestarts reached: condition Failed=True, no Complete."""
    spec = {**SITECLIENT["spec"], "backoff": {"initialSeconds": 0.2, "maxSeconds": 0.2, "maxRestarts": 1}}
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, {**SITECLIENT, "spec": spec})
        await _pod_in(api, 1, "Failed")
        await _pod_in(api, 2, "Failed")
        await wait_for(lambda: _condition(api, "Failed").get("status") == "True", what="Failed=True")
        assert _status(api)["phase"] == "Failed" and _condition(api, "Failed")["reason"] == "RestartLimit"
        assert not _condition(api, "Complete") and _status(api)["completionTime"]
    assert runner.exception is None


async def test_suspend_stops_the_job_and_resume_starts_a_new_attempt(api, fake_ps) -> None:
    """spec.suspend: the Job goes, nothing launches; back to false: attempt 2 with a fresh token, no restart."""
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        pod = await _pod_in(api, 1, "Running")
        await wait_for(lambda: _status(api).get("phase") == "Running", what="Running")

        await patch(api, "geofed.io/v1alpha1", "SiteClient", NAMESPACE, "gpu0", {"spec": {"suspend": True}})
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1") is None, what="Job stopped")
        await wait_for(lambda: _condition(api, "Suspended").get("status") == "True", what="Suspended=True")
        await delete(api, "v1", "Pod", NAMESPACE, pod)  # the Job's pod is gone with it
        await asyncio.sleep(1.0)
        assert get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2") is None and len(fake_ps.tokens) == 1
        assert _status(api)["phase"] == "Suspended" and _condition(api, "Ready")["status"] == "False"

        await patch(api, "geofed.io/v1alpha1", "SiteClient", NAMESPACE, "gpu0", {"spec": {"suspend": False}})
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
        await wait_for(lambda: _status(api).get("attempt") == 2, what="attempt 2")
        assert _status(api)["restarts"] == 0 and len(fake_ps.tokens) == 2
        assert _condition(api, "Suspended")["status"] == "False"
    assert runner.exception is None


def _events(api: GeofedEmulator, reason: str) -> list[dict]:
    live = [
        o.raw
        for (r, ns, _), o in list(api.objects.items())
        if r.plural == "events" and ns == NAMESPACE and not o.deleted
    ]
    return [e for e in live if e.get("reason") == reason]


async def test_env_from_a_secret_keeps_the_credential_out_and_a_literal_one_is_warned_about(api, fake_ps) -> None:
    """valueFrom.secretKeyRef reaches the Job as a reference; a literal HF_TOKEN launches with a Warning event."""
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
           {"name": "WANDB_API_KEY", "value": "wandb-literal-1234"}]  # fmt: skip
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, {**SITECLIENT, "spec": {**SITECLIENT["spec"], "env": env}})
        job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job 1")
        job_env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert job_env["HF_TOKEN"] == env[0]
        warning = await wait_for(lambda: _events(api, "LiteralSecretEnv"), what="a LiteralSecretEnv event")
        assert "WANDB_API_KEY" in warning[0]["message"] and "HF_TOKEN" not in warning[0]["message"]
        assert warning[0]["type"] == "Warning" and "wandb-literal-1234" not in warning[0]["message"]
    assert runner.exception is None


class _RefusingSecretWrites(Kube):
    """The operator's Kube adapter in front of an API server whose admission refuses writing token data.

    A real cluster would answer so with a validating webhook or a ValidatingAdmissionPolicy on Secret
    updates; the emulator has no admission of updates, so the refusal is played here, with the 403 an
    API server returns, while every other call goes to the emulator unchanged.
    """

    refusing = True

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        if type(self).refusing and obj["kind"] == "Secret" and obj.get("data"):
            raise KubeError(
                403, "Forbidden", f'admission webhook "secrets.example.org" denied {obj["metadata"]["name"]}'
            )
        return super().apply(obj)


async def test_a_token_whose_secret_cannot_be_written_is_minted_once(api, fake_ps) -> None:
    """Minted, then its Secret's data refused: later ticks store the same token, never mint another."""
    _RefusingSecretWrites.refusing = True
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory,
                kube_factory=lambda: _RefusingSecretWrites(Kube.from_environment().api))  # fmt: skip
    runner = KopfRunner(["run", "--standalone", "-A"], registry=build_registry("site", deps), timeout=30)
    async with operator_running(runner):
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "SecretRejected", what="SecretRejected")
        assert "denied" in _condition(api, "Degraded")["message"]
        await asyncio.sleep(1.5)  # several ticks
        assert len(fake_ps.tokens) == 1
        _RefusingSecretWrites.refusing = False  # the policy is fixed: the one token is stored and used
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="the Job")
        secret = get(api, "v1/secrets", NAMESPACE, "gpu0-token-1")
        assert base64.b64decode(secret["data"]["token"]).decode() == fake_ps.tokens[0][0] and len(fake_ps.tokens) == 1
    assert runner.exception is None


async def test_a_preemption_is_reported_after_the_pod_object_is_gone(api, fake_ps) -> None:
    """The scheduler sets DisruptionTarget, the pod stops and is removed between two status passes, and the
    Job controller marks the Job Failed: the SiteClient still says PreemptionByScheduler, not the Job's reason."""
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=3.0, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory)
    runner = KopfRunner(["run", "--standalone", "-A"], registry=build_registry("site", deps), timeout=30)
    async with operator_running(runner):
        await watches_open(api, {"siteclients", "pods"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        pod = await _pod_in(api, 1, "Running")
        await wait_for(lambda: _status(api).get("phase") == "Running", timeout=20, what="Running")
        target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                  "message": "Preempted in order to admit critical pod"}  # fmt: skip
        await patch(api, "v1", "Pod", NAMESPACE, pod, {"status": {"phase": "Failed", "conditions": [target]}},
                    status=True)  # fmt: skip
        await asyncio.sleep(0.3)
        await delete(api, "v1", "Pod", NAMESPACE, pod)
        failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                  "message": "Job has reached the specified backoff limit"}  # fmt: skip
        await patch(api, "batch/v1", "Job", NAMESPACE, "gpu0-1", {"status": {"conditions": [failed]}}, status=True)
        await wait_for(lambda: _status(api).get("lastFailureReason"), timeout=20, what="a failure reason")
        assert _status(api)["lastFailureReason"] == "PreemptionByScheduler"
    assert runner.exception is None
