"""Why a workload's pod is not running: read from the objects the cluster's controllers write.

Pure functions over Pod, Deployment, PersistentVolumeClaim and Event dicts, shared by the SiteClient's
attempts (a Job's pod) and the Federation's status (the PS Deployment's pod). Each problem is a
(reason, message) pair: the reason the API gave, and its message followed by a hint on what to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Container waiting reasons that pass on their own (the kubelet is still preparing the container).
TRANSIENT_WAITING = (None, "ContainerCreating", "PodInitializing")

HINTS = {
    "FailedCreate": (
        "the API server refused the pod: check the namespace's ResourceQuota and LimitRange, its Pod Security "
        "level (or OpenShift SCC) against the pod's securityContext, and that a named PriorityClass exists"
    ),
    "ErrImagePull": "check the image name and tag, the registry's reachability and spec.imagePullSecrets",
    "ImagePullBackOff": "check the image name and tag, the registry's reachability and spec.imagePullSecrets",
    "InvalidImageName": "the image reference is malformed: fix spec.image",
    "CrashLoopBackOff": "the container keeps exiting: read `kubectl logs --previous` of the pod",
    "CreateContainerConfigError": "a Secret or ConfigMap key the pod reads is missing",
    "Unschedulable": (
        "no node can take the pod: lower spec.resources, add nodes, or fix nodeSelector, tolerations and affinity"
    ),
    "ClaimPending": (
        "the volume claim is not bound: set spec.storage.storageClassName to a StorageClass of this cluster "
        "(`kubectl get storageclass`), or mark one as the default"
    ),
}


def with_hint(reason: str, message: str) -> str:
    """`message` followed by what to change for `reason`, when there is a known hint."""
    hint = HINTS.get(reason)
    return f"{message}; {hint}" if hint else message


def waiting_problem(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """A pod's visible trouble before it runs: a container's waiting reason (ImagePullBackOff,
    CrashLoopBackOff, CreateContainerConfigError), else the scheduler's PodScheduled=False reason."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in TRANSIENT_WAITING:
            return waiting["reason"], waiting.get("message", "")
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("reason") or "Unschedulable", cond.get("message", "")
    return None


def failed_create(events: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """A controller's newest FailedCreate warning event: quota, Pod Security, a missing PriorityClass..."""
    failed = [e for e in events if e.get("reason") == "FailedCreate"]
    if not failed:
        return None
    newest = max(failed, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return "FailedCreate", str(newest.get("message", ""))


def replica_failure(deployment: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Deployment's ReplicaFailure condition, which the Deployment controller copies from its
    ReplicaSet when the API server refuses the ReplicaSet's pod (reason FailedCreate)."""
    for cond in (deployment.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return cond.get("reason") or "FailedCreate", str(cond.get("message", ""))
    return None


def claim_problem(claim: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """A PersistentVolumeClaim left Pending (no default StorageClass, no matching volume, a slow provisioner)."""
    if claim is None:
        return None
    phase = (claim.get("status") or {}).get("phase")
    if phase in (None, "Bound"):
        return None
    name = (claim.get("metadata") or {}).get("name", "")
    klass = (claim.get("spec") or {}).get("storageClassName")
    which = f"StorageClass {klass!r}" if klass else "no storageClassName (the cluster's default StorageClass)"
    return "ClaimPending", f"PersistentVolumeClaim {name!r} is {phase} ({which})"


def workload_problem(
    deployment: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any] | None] = (),
) -> tuple[str, str] | None:
    """(reason, message with hint) of what keeps a Deployment's pod from running, or None if nothing does.

    A refused pod (ReplicaFailure) first: no pod exists then. An unschedulable pod whose claim is
    Pending is a ClaimPending problem: the scheduler's "unbound immediate PersistentVolumeClaims" names
    no claim. A Pending claim alone is not one: with `WaitForFirstConsumer` it binds once the pod is placed.
    """
    refused = replica_failure(deployment)
    if refused is not None:
        reason, message = refused
        name = (deployment.get("metadata") or {}).get("name", "")
        return reason, with_hint(reason, f"Deployment {name} cannot create its pod: {message}")
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        problem = waiting_problem(pod)
        if problem is None:
            continue
        reason, message = problem
        name = (pod.get("metadata") or {}).get("name", "pod")
        said = f"pod {name}: {reason}: {message}" if message else f"pod {name}: {reason}"
        pending = next((p for p in map(claim_problem, claims) if p is not None), None)
        if reason == "Unschedulable" and pending is not None:
            return pending[0], with_hint(pending[0], f"{pending[1]}; {said}")
        return reason, with_hint(reason, said)
    return None
