"""The Deployment and Job controllers, as far as the operator's objects need them.

Deployment: pods owned by the Deployment itself (a real cluster puts a ReplicaSet between them),
named `<deployment>-<template hash>-<suffix>` with the `pod-template-hash` label. `Recreate` deletes
every old pod and creates the new one only when no old pod exists and none still runs on the node;
`RollingUpdate` creates the new pods first and deletes the old ones once the new are ready. A pod
being deleted no longer counts as a replica (its replacement starts at once, as a ReplicaSet does).
A pod the API server refuses (quota, Pod Security) sets the Deployment's `ReplicaFailure` condition
(reason `FailedCreate`, the API's message) until a create succeeds, as the Deployment controller
copies it from its ReplicaSet; the ReplicaSet's `FailedCreate` events are not posted.

Job: one pod at a time (parallelism and completions 1), a replacement as soon as the previous pod is
terminating or failed, `backoffLimit` over failed pods, `activeDeadlineSeconds`. A failing Job gets
`FailureTarget` and `Failed` at once while its pods may still be terminating (clusters with delayed
terminal conditions set `Failed` only after they stopped); `Complete` after a pod succeeded. Job pods
carry no `batch.kubernetes.io/job-tracking` finalizer: a stopped pod goes as soon as the kubelet deletes
it, where a real Job controller's finalizer keeps it the moment it takes to count it. A Job pod the
API server refuses (quota, LimitRange, Pod Security) gets the Job a `FailedCreate` warning event
(`Error creating: <the API's message>`, its count bumped at most once a second while the refusal
repeats, as the event recorder aggregates) and is retried on each sync, without the real controller's
back-off.

Claims: bound at once when the cluster has a default StorageClass or the claim names one (no
PersistentVolume objects, no `WaitForFirstConsumer` binding); Pending forever otherwise.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

from ..objects import patch
from .kubelet import _ready, now

if TYPE_CHECKING:
    from .kubelet import Kubelet

TERMINAL = ("Succeeded", "Failed")


def template_hash(template: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _owned(kubelet: Kubelet, owner: dict[str, Any]) -> list[dict[str, Any]]:
    uid, ns = owner["metadata"]["uid"], owner["metadata"]["namespace"]
    return [
        p for p in kubelet.objects("v1/pods")
        if p["metadata"]["namespace"] == ns
        and any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences") or [])
    ]  # fmt: skip


def _live(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in TERMINAL


async def _create_pod(
    kubelet: Kubelet, owner: dict[str, Any], name: str, extra_labels: dict[str, str]
) -> str | None:
    """Create the owner's pod; the API server's message when it refuses it (quota, admission), else None."""
    meta, template = owner["metadata"], owner["spec"]["template"]
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
           "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    pod_meta: dict[str, Any] = {
        "name": name, "namespace": meta["namespace"], "ownerReferences": [ref],
        "labels": {**(template.get("metadata") or {}).get("labels", {}), **extra_labels},
    }  # fmt: skip
    if (template.get("metadata") or {}).get("annotations"):
        pod_meta["annotations"] = dict(template["metadata"]["annotations"])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}
    async with kubelet.api.post(f"/api/v1/namespaces/{meta['namespace']}/pods", json=pod) as resp:
        if resp.status < 300:
            return None
        body = await resp.json()
        assert resp.status in (403, 422), body  # refused by admission or validation; anything else is a bug here
        return str(body.get("message", ""))


async def _delete_pod(kubelet: Kubelet, pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    async with kubelet.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}") as resp:
        assert resp.status < 300 or resp.status == 404, await resp.text()


async def _set_status(kubelet: Kubelet, obj: dict[str, Any], status: dict[str, Any]) -> None:
    old = obj.get("status") or {}
    if all(old.get(k) == v for k, v in status.items()):
        return
    meta = obj["metadata"]
    await patch(kubelet.api, obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], {"status": status},
                status=True)  # fmt: skip


async def _failed_create(kubelet: Kubelet, owner: dict[str, Any], message: str) -> None:
    """The controller's `FailedCreate` warning event on its owner, or the same event's count bumped."""
    meta, stamp, text = owner["metadata"], now(), f"Error creating: {message}"
    for event in kubelet.objects("v1/events"):
        if (event.get("involvedObject") or {}).get("uid") == meta["uid"] and event.get("message") == text:
            if event.get("lastTimestamp") != stamp:
                await patch(kubelet.api, "v1", "Event", meta["namespace"], event["metadata"]["name"],
                            {"count": int(event.get("count") or 1) + 1, "lastTimestamp": stamp})  # fmt: skip
            return
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta["uid"]},
        "type": "Warning", "reason": "FailedCreate", "message": text, "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "source": {"component": "job-controller"},
    }  # fmt: skip
    async with kubelet.api.post(f"/api/v1/namespaces/{meta['namespace']}/events", json=event) as resp:
        assert resp.status < 300, await resp.text()


async def sync_deployments(kubelet: Kubelet) -> None:
    for dep in kubelet.objects("apps/v1/deployments"):
        if dep["metadata"].get("deletionTimestamp"):
            continue
        digest = template_hash(dep["spec"]["template"])
        pods = _owned(kubelet, dep)
        current = [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") == digest and _live(p)]
        old = [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") != digest]
        replicas = int(dep["spec"].get("replicas", 1))
        recreate = (dep["spec"].get("strategy") or {}).get("type") == "Recreate"
        # The ReplicaSet's ReplicaFailure condition, which the Deployment controller copies: kept until a create works.
        refused = next((c["message"] for c in (dep.get("status") or {}).get("conditions") or []
                        if c["type"] == "ReplicaFailure"), None)  # fmt: skip
        if recreate and old:
            for pod in old:
                if not pod["metadata"].get("deletionTimestamp"):
                    await _delete_pod(kubelet, pod)
        elif recreate and any(w.owner == f"Deployment/{dep['metadata']['name']}" and kubelet.running(n)
                              and w.uid not in {p["metadata"]["uid"] for p in pods}
                              for n, w in list(kubelet.pods.items())):  # fmt: skip
            pass  # an old pod is gone from the API but its container still stops on the node
        else:
            for _ in range(replicas - len(current)):
                name = f"{dep['metadata']['name']}-{digest}-{secrets.token_hex(3)[:5]}"
                refused = await _create_pod(kubelet, dep, name, {"pod-template-hash": digest})
            if replicas <= len(current):
                refused = None
            for pod in current[replicas:]:
                await _delete_pod(kubelet, pod)
            if not recreate and len([p for p in current if _ready(p)]) >= replicas:
                for pod in old:
                    if not pod["metadata"].get("deletionTimestamp"):
                        await _delete_pod(kubelet, pod)
        live = [p for p in pods if _live(p)]
        ready = len([p for p in live if _ready(p)])
        available = "True" if ready >= replicas else "False"
        reason = "MinimumReplicasAvailable" if available == "True" else "MinimumReplicasUnavailable"
        conditions = [{"type": "Available", "status": available, "reason": reason}]
        if refused is not None:
            conditions.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                               "message": refused})  # fmt: skip
        await _set_status(kubelet, dep, {
            "observedGeneration": dep["metadata"].get("generation", 1),
            "replicas": len(live), "updatedReplicas": len(current), "readyReplicas": ready,
            "availableReplicas": ready, "unavailableReplicas": max(0, replicas - ready),
            "conditions": conditions,
        })  # fmt: skip


def _since(stamp: str) -> float:
    return time.time() - dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


async def sync_jobs(kubelet: Kubelet) -> None:
    for job in kubelet.objects("batch/v1/jobs"):
        meta, spec = job["metadata"], job["spec"]
        status = dict(job.get("status") or {})
        pods = _owned(kubelet, job)
        failed = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Failed" or p["metadata"].get("deletionTimestamp")
        ]
        succeeded = [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]
        active = [p for p in pods if _live(p)]
        finished = any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in status.get("conditions") or []
        )
        counts = {"active": len(active), "failed": len(failed), "succeeded": len(succeeded),
                  "ready": len([p for p in active if _ready(p)]),
                  "terminating": len([p for p in pods if p["metadata"].get("deletionTimestamp")])}  # fmt: skip
        if finished or meta.get("deletionTimestamp"):
            if finished:
                for pod in active:
                    await _delete_pod(kubelet, pod)
                await _set_status(kubelet, job, {**counts, "active": 0})
            continue
        start = status.get("startTime") or now()
        deadline = spec.get("activeDeadlineSeconds")
        failure: tuple[str, str] | None = None
        if len(failed) > int(spec.get("backoffLimit", 6)):
            failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline is not None and _since(start) > float(deadline):
            failure = ("DeadlineExceeded", "Job was active longer than specified deadline")
        if succeeded:
            stamp = now()
            message = "Reached expected number of succeeded pods"
            conditions = [{"type": t, "status": "True", "reason": "CompletionsReached", "message": message,
                           "lastTransitionTime": stamp} for t in ("SuccessCriteriaMet", "Complete")]  # fmt: skip
            await _set_status(
                kubelet, job, {**counts, "startTime": start, "completionTime": stamp, "conditions": conditions}
            )
            continue
        if failure is not None:
            for pod in active:
                await _delete_pod(kubelet, pod)
            stamp = now()
            conditions = [{"type": t, "status": "True", "reason": failure[0], "message": failure[1],
                           "lastTransitionTime": stamp} for t in ("FailureTarget", "Failed")]  # fmt: skip
            await _set_status(kubelet, job, {**counts, "startTime": start, "conditions": conditions})
            continue
        if not active and not spec.get("suspend"):
            name = f"{meta['name']}-{secrets.token_hex(3)[:5]}"
            labels = {"job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"],
                      "controller-uid": meta["uid"], "batch.kubernetes.io/controller-uid": meta["uid"]}  # fmt: skip
            refused = await _create_pod(kubelet, job, name, labels)
            if refused is not None:
                await _failed_create(kubelet, job, refused)
            else:
                counts["active"] = 1
        await _set_status(kubelet, job, {**counts, "startTime": start})


async def sync_claims(kubelet: Kubelet) -> None:
    """The PersistentVolume controller with a dynamic provisioner behind the cluster's default StorageClass:
    a claim binds at once when it names a StorageClass or the cluster has a default one (`Kubelet.default_class`),
    else it stays Pending, as on a cluster without a default StorageClass."""
    for pvc in kubelet.objects("v1/persistentvolumeclaims"):
        if (pvc.get("status") or {}).get("phase") == "Bound" or pvc["metadata"].get("deletionTimestamp"):
            continue
        if (pvc.get("spec") or {}).get("storageClassName") or kubelet.default_class:
            await _set_status(kubelet, {**pvc, "apiVersion": "v1", "kind": "PersistentVolumeClaim"},
                              {"phase": "Bound", "accessModes": pvc["spec"].get("accessModes", []),
                               "capacity": ((pvc["spec"].get("resources") or {}).get("requests") or {})})  # fmt: skip
