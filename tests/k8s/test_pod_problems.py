"""`pod_problems.workload_problem`: which pod states are problems, which are a pod still starting."""

from __future__ import annotations

from typing import Any

import pytest

from geofed_operator.pod_problems import workload_problem

DEPLOYMENT: dict[str, Any] = {"metadata": {"name": "demo-ps"}, "status": {"replicas": 1}}


def _pod(waiting: str | None = None, scheduled: tuple[str, str] | None = None, deleted: bool = False) -> dict:
    status: dict[str, Any] = {"phase": "Pending"}
    if waiting is not None:
        status["containerStatuses"] = [{"name": "ps", "state": {"waiting": {"reason": waiting, "message": "m"}}}]
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": scheduled[0],
                                 "message": scheduled[1]}]  # fmt: skip
    meta: dict[str, Any] = {"name": "demo-ps-1"}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


def _claim(phase: str) -> dict[str, Any]:
    return {"metadata": {"name": "demo-checkpoints"}, "spec": {}, "status": {"phase": phase}}


UNBOUND = ("Unschedulable", "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.")


@pytest.mark.parametrize(
    ("pods", "claims", "expected"),
    [
        ([], [], None),  # no pod yet, nothing refused: the controller is still at it
        ([_pod("ContainerCreating")], [_claim("Bound")], None),
        ([_pod("PodInitializing")], [], None),
        ([_pod()], [_claim("Pending")], None),  # WaitForFirstConsumer: the claim binds once the pod is placed
        ([_pod("CrashLoopBackOff")], [], "CrashLoopBackOff"),
        ([_pod("ImagePullBackOff")], [], "ImagePullBackOff"),
        ([_pod("CreateContainerConfigError")], [], "CreateContainerConfigError"),
        ([_pod(scheduled=("Unschedulable", "0/3 nodes are available: 3 Insufficient memory."))], [], "Unschedulable"),
        ([_pod(scheduled=UNBOUND)], [_claim("Pending")], "ClaimPending"),
        ([_pod(scheduled=UNBOUND)], [_claim("Bound")], "Unschedulable"),
        ([_pod("CrashLoopBackOff", deleted=True)], [], None),  # the old pod of a roll, on its way out
    ],
)
def test_what_is_a_problem(pods: list[dict], claims: list[dict], expected: str | None) -> None:
    problem = workload_problem(DEPLOYMENT, pods, claims)
    assert (problem[0] if problem else None) == expected


def test_a_refused_pod_comes_first_with_the_api_message_and_a_hint() -> None:
    refused = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": 'pods "demo-ps-1" is forbidden: exceeded quota: q'}  # fmt: skip
    deployment = {**DEPLOYMENT, "status": {"conditions": [refused]}}
    reason, message = workload_problem(deployment, [_pod("CrashLoopBackOff")], [_claim("Pending")]) or ("", "")
    assert reason == "FailedCreate"
    assert message.startswith('Deployment demo-ps cannot create its pod: pods "demo-ps-1" is forbidden: exceeded')
    assert "ResourceQuota" in message and "LimitRange" in message and "SCC" in message
