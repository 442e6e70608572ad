"""A SiteClient whose pod's node is lost: pod garbage collection counts as a preemption, and a pod stuck
terminating on a node that never confirms is force-deleted after a bound so the next attempt starts.

No kubelet runs here, as on a lost node: nothing confirms a graceful deletion, and the emulated API
server keeps the pod, `deletionTimestamp` set and phase Running, until a DELETE with grace 0 (a real
API server does the same). What differs: the test plays the taint manager's and the pod garbage
collector's writes (`DisruptionTarget`, then the delete) instead of a node lifecycle controller.
"""

from __future__ import annotations

import datetime as dt

import pytest
from kopf.testing import KopfRunner

from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, get, patch
from .test_operator_siteclient import CREDENTIAL, SITECLIENT, _status

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]


def _runner(fake_ps: FakePS, force_delete_after_s: float) -> KopfRunner:
    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2,
                                force_delete_after_s=force_delete_after_s)  # fmt: skip
    deps = Deps(settings=settings, admin_factory=fake_ps.factory)
    return KopfRunner(["run", "--standalone", "-A"], registry=build_registry("site", deps), timeout=30)


async def _running_pod(api: GeofedEmulator, attempt: int) -> str:
    """The attempt's pod, bound to a node and running, as the Job controller and the kubelet leave it."""
    job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, f"gpu0-{attempt}"), what=f"Job {attempt}")
    name = f"gpu0-{attempt}-abcde"
    spec = {**job["spec"]["template"]["spec"], "nodeName": "node-7"}
    meta = {"name": name, "namespace": NAMESPACE, "labels": job["spec"]["template"]["metadata"]["labels"]}
    await create(api, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"name": "client", "state": {"running": {"startedAt": now}}}
    await patch(api, "v1", "Pod", NAMESPACE, name, {"status": {"phase": "Running", "containerStatuses": [running]}},
                status=True)  # fmt: skip
    return name


async def _taken_away(api: GeofedEmulator, name: str, reason: str, message: str, grace_s: int) -> None:
    """What the node lifecycle's controllers write: `DisruptionTarget` with `reason`, then a delete."""
    target = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}
    await patch(api, "v1", "Pod", NAMESPACE, name, {"status": {"conditions": [target]}}, status=True)
    async with api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", json={"gracePeriodSeconds": grace_s}) as r:
        assert r.status < 300, await r.text()


def _events(api: GeofedEmulator) -> list[tuple[str, str]]:
    return [
        (o.raw.get("reason"), o.raw.get("message", ""))
        for (resource, ns, _), o in list(api.objects.items())
        if resource.plural == "events" and ns == NAMESPACE and not o.deleted
    ]


async def _applied(api: GeofedEmulator) -> None:
    await watches_open(api, {"siteclients", "pods"})
    await create(api, CREDENTIAL)
    await create(api, SITECLIENT)


async def test_a_pod_garbage_collected_off_a_deleted_node_is_a_preemption(api, fake_ps) -> None:
    """The pod GC's DeletionByPodGC (its node object is gone): a Preempted event, and the next attempt."""
    async with operator_running(_runner(fake_ps, 300)) as runner:
        await _applied(api)
        pod = await _running_pod(api, 1)
        await _taken_away(api, pod, "DeletionByPodGC", "PodGC: node no longer exists", 0)
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
        assert _status(api)["lastFailureReason"] == "DeletionByPodGC"
        assert [r for r, _ in _events(api) if r in ("Preempted", "AttemptFailed")] == ["Preempted"]
    assert runner.exception is None


async def test_a_pod_stuck_terminating_on_a_lost_node_is_force_deleted_after_the_bound(api, fake_ps) -> None:
    """The taint manager evicts the pod of an unreachable node (grace 1 s); no kubelet confirms: 2 s after the
    grace period the operator force-deletes it, and only then does attempt 2 start."""
    async with operator_running(_runner(fake_ps, 2)) as runner:
        await _applied(api)
        pod = await _running_pod(api, 1)
        await _taken_away(api, pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", 1)
        await wait_for(lambda: _status(api).get("lastFailureReason") == "DeletionByTaintManager", what="taken away")
        assert get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2") is None  # the old pod may still run: wait
        await wait_for(lambda: get(api, "v1/pods", NAMESPACE, pod) is None, 30, "the stuck pod force-deleted")
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job of attempt 2")
        forced = [m for r, m in _events(api) if r == "ForceDeleted"]
        assert len(forced) == 1 and pod in forced[0] and "lost or NotReady" in forced[0]
    assert runner.exception is None


async def test_a_pod_within_the_bound_is_not_force_deleted(api, fake_ps) -> None:
    """A kubelet may still be stopping the pod: before the bound nothing is forced and no attempt starts."""
    async with operator_running(_runner(fake_ps, 300)) as runner:
        await _applied(api)
        pod = await _running_pod(api, 1)
        await _taken_away(api, pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", 1)
        await wait_for(lambda: any(c["reason"] == "WaitingForPreviousPod" for c in _status(api).get("conditions")
                                   or []), 30, "waiting for the old pod")  # fmt: skip
        assert get(api, "v1/pods", NAMESPACE, pod)["metadata"]["deletionTimestamp"]
        assert get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2") is None
        assert "ForceDeleted" not in [r for r, _ in _events(api)]
    assert runner.exception is None
