"""SiteClient defects of issue 11, each played against the real operator and the emulated API server.

A Job the API server refuses, pods a Job cannot create (a FailedCreate event the test writes, and
one the test node's Job controller posts when a compute ResourceQuota refuses the pod), a spec
change while the client runs, a preemption, and the status keys the CRD really has.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from .conftest import NAMESPACE, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .kubelet import Kubelet
from .node.testing import node_root
from .objects import create, delete, get, patch
from .test_operator_siteclient import CREDENTIAL, SITECLIENT, _runner, _status

__all__ = ["node_root"]
pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]


def _condition(api: GeofedEmulator, kind: str) -> dict:
    return next((c for c in _status(api).get("conditions") or [] if c["type"] == kind), {})


def _reasons(api: GeofedEmulator) -> list[str]:
    return [
        o.raw.get("reason")
        for (resource, ns, _), o in list(api.objects.items())
        if resource.plural == "events" and ns == NAMESPACE and not o.deleted
    ]


async def _applied(api: GeofedEmulator) -> None:
    """The site's credential and its SiteClient, applied once the operator watches."""
    await watches_open(api, {"siteclients"})
    await create(api, CREDENTIAL)
    await create(api, SITECLIENT)


async def _pod_of(api: GeofedEmulator, attempt: int, phase: str = "Running") -> str:
    """Play the Job controller and the kubelet: the attempt's pod, in `phase`."""
    job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, f"gpu0-{attempt}"), what=f"Job {attempt}")
    name = f"gpu0-{attempt}-abcde"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": job["spec"]["template"]["metadata"]["labels"]},
        "spec": job["spec"]["template"]["spec"],
    }
    await create(api, pod)
    await patch(api, "v1", "Pod", NAMESPACE, name, {"status": {"phase": phase}}, status=True)
    return name


async def test_a_refused_job_is_degraded_with_the_reason_and_mints_one_token(api, fake_ps) -> None:
    """Quota refuses the Job: Degraded JobRejected; ticks retry with the same token; the quota raised, it runs."""
    api.refuse("jobs", 'jobs.batch "gpu0-1" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=2')
    async with operator_running(_runner(fake_ps)) as runner:
        await _applied(api)
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "JobRejected", what="JobRejected")
        assert "exceeded quota" in _condition(api, "Degraded")["message"] and _status(api)["phase"] == "Degraded"
        await asyncio.sleep(1.5)  # several ticks
        assert len(fake_ps.tokens) == 1, "a refused launch must not mint a token per tick"
        await wait_for(lambda: "JobRejected" in _reasons(api), what="a JobRejected event")

        api.allow("jobs")
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="the Job once allowed")
        assert len(fake_ps.tokens) == 1
        # The status key is the CRD's clientID (clientId would be pruned and re-patched forever).
        assert _status(api)["clientID"] == "uw.gpu0" and "clientId" not in _status(api)
    assert runner.exception is None


async def test_a_job_that_cannot_create_its_pod_says_why(api, fake_ps) -> None:
    """No pod, a FailedCreate event on the Job (missing PriorityClass): Degraded FailedCreate, not silence."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _applied(api)
        job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job 1")
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await create(api, {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "gpu0-1.17f0", "namespace": NAMESPACE},
            "involvedObject": {"kind": "Job", "name": "gpu0-1", "namespace": NAMESPACE,
                               "uid": job["metadata"]["uid"], "apiVersion": "batch/v1"},
            "type": "Warning", "reason": "FailedCreate", "lastTimestamp": now,
            "message": 'Error creating: pods "gpu0-1-" is forbidden: no PriorityClass with name spot was found',
        })  # fmt: skip
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "FailedCreate", what="FailedCreate")
        assert "PriorityClass" in _condition(api, "Degraded")["message"]
        assert _status(api)["phase"] == "Launching"  # still the same attempt: fixing the class lets it run
    assert runner.exception is None


async def test_a_job_pod_over_the_gpu_quota_is_degraded_with_the_api_message(api, fake_ps, node_root) -> None:
    """gpusPerPod 2 against `requests.nvidia.com/gpu: 1`: the node's Job controller posts FailedCreate."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": NAMESPACE},
             "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}}  # fmt: skip
    await create(api, quota)
    async with Kubelet(api, node_root), operator_running(_runner(fake_ps)) as runner:
        await _applied(api)
        await wait_for(lambda: _condition(api, "Degraded").get("reason") == "FailedCreate", what="FailedCreate")
        message = _condition(api, "Degraded")["message"]
        assert 'Error creating: pods "gpu0-1-' in message
        assert ("is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=2, used: "
                "requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=1") in message  # fmt: skip
        assert _status(api)["phase"] == "Launching"
    assert runner.exception is None


async def test_a_spec_change_never_runs_two_pods_as_one_client(api, fake_ps) -> None:
    """The replaced attempt's pod must be gone before the next attempt's Job exists."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _applied(api)
        old_pod = await _pod_of(api, 1)
        await wait_for(lambda: _status(api).get("phase") == "Running", what="Running")

        await patch(api, "geofed.io/v1alpha1", "SiteClient", NAMESPACE, "gpu0", {"spec": {"gpusPerPod": 1}})
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1") is None, what="old Job deleted")
        await asyncio.sleep(1.0)  # ticks pass while the old pod is still terminating
        assert get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2") is None, "two pods would share uw.gpu0"
        assert "waiting for pod" in _condition(api, "Progressing")["message"]

        await delete(api, "v1", "Pod", NAMESPACE, old_pod)  # the kubelet finished stopping it
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
        assert _status(api)["restarts"] == 0  # a spec change is no restart
    assert runner.exception is None


async def test_preemption_and_launches_are_events(api, fake_ps) -> None:
    """Launched, then Preempted (DisruptionTarget), as `kubectl describe siteclient` shows them."""
    async with operator_running(_runner(fake_ps)) as runner:
        await _applied(api)
        pod = await _pod_of(api, 1)
        await wait_for(lambda: "Launched" in _reasons(api), what="a Launched event")
        target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                  "message": "Preempted in order to admit critical pod"}  # fmt: skip
        await patch(api, "v1", "Pod", NAMESPACE, pod, {"status": {"conditions": [target]}}, status=True)
        await wait_for(lambda: "Preempted" in _reasons(api), what="a Preempted event")
        await wait_for(lambda: _status(api).get("lastFailureReason") == "PreemptionByScheduler", what="reason")
    assert runner.exception is None
