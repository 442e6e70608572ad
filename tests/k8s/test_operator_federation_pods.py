"""The Federation reports why its PS pod does not run, against the operator, the emulator and the test node.

Each cause is produced by the part of the cluster that produces it on a real one: admission refusing
the pod (a ResourceQuota's pod count or compute resources, a LimitRange; the Deployment controller's
`ReplicaFailure`), the registry lacking the image (the kubelet's
`ErrImagePull`/`ImagePullBackOff`), no default StorageClass (the claim stays Pending and the scheduler
leaves the pod unbound), too little cpu on the node (the scheduler's `Insufficient cpu`) and a
container that keeps exiting (`CrashLoopBackOff`). What a real cluster still does differently is in
the test node's docstrings (`tests/k8s/node/`): one node, claims bound without PersistentVolumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import NAMESPACE, FakePS, operator_running, rolled_out_until, wait_for, watches_open
from .emulator import GeofedEmulator
from .kubelet import Kubelet, ProcessRuntime
from .node.runtime import Container, ContainerConfig
from .node.testing import node_root
from .objects import create, get, patch
from .test_operator_federation import FED, _runner

__all__ = ["node_root"]
pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator), pytest.mark.timeout(120)]


class ExitingRuntime(ProcessRuntime):
    """Runs every container's command as one that prints an error and exits 1, as a PS whose image lacks a
    library it imports would: the kubelet restarts it with its back-off and reports `CrashLoopBackOff`."""

    def start(self, cfg: ContainerConfig, pod_dir: Path) -> Container:
        cfg.argv = ["sh", "-c", "echo 'ImportError: libcuda.so.1' >&2; exit 1"]
        return super().start(cfg, pod_dir)


def _degraded(api: GeofedEmulator) -> dict[str, Any] | None:
    status = (get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo") or {}).get("status") or {}
    if status.get("phase") != "Degraded":
        return None
    return next(c for c in status["conditions"] if c["type"] == "Degraded")


async def _degraded_with(api: GeofedEmulator, fake_ps: FakePS, kubelet: Kubelet, spec: dict[str, Any]) -> dict:
    """Apply the Federation (with `spec` over FED's) while the node runs; its Degraded condition once it shows."""
    async with kubelet, operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, {**FED, "spec": {**FED["spec"], **spec}})
        condition = await wait_for(lambda: _degraded(api), 60, "phase Degraded")
    assert runner.exception is None
    assert not fake_ps.calls  # never Ready: the PS was not asked for its status
    return condition


async def test_a_pod_refused_by_quota_is_degraded_with_the_api_message(api, fake_ps, node_root) -> None:
    """ResourceQuota pods=0: the API refuses the PS pod; FailedCreate with the quota's message and a hint."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods", "namespace": NAMESPACE},
             "spec": {"hard": {"pods": "0"}}}  # fmt: skip
    await create(api, quota)
    cond = await _degraded_with(api, fake_ps, Kubelet(api, node_root), {})
    assert cond["reason"] == "FailedCreate"
    assert "is forbidden: exceeded quota: no-pods, requested: pods=1" in cond["message"]
    assert "ResourceQuota" in cond["message"]  # the hint


@pytest.mark.parametrize(
    ("hard", "said"),
    [
        # The PS requests 1 CPU and 2Gi (the spec's defaults) and names no limits.
        ({"requests.cpu": "500m"}, "exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=0, "
                                   "limited: requests.cpu=500m"),
        ({"limits.memory": "8Gi"}, "failed quota: compute: must specify limits.memory for: ps"),
    ],
)  # fmt: skip
async def test_a_pod_over_a_compute_quota_is_degraded_with_the_api_message(api, fake_ps, node_root, hard, said) -> None:
    """A compute ResourceQuota refuses the PS pod: the Deployment's ReplicaFailure carries the quota's message."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute", "namespace": NAMESPACE},
             "spec": {"hard": hard}}  # fmt: skip
    await create(api, quota)
    cond = await _degraded_with(api, fake_ps, Kubelet(api, node_root), {})
    assert cond["reason"] == "FailedCreate"
    assert cond["message"].startswith('Deployment demo-ps cannot create its pod: pods "demo-ps-')
    assert f"is forbidden: {said}; " in cond["message"] and "ResourceQuota" in cond["message"]


@pytest.mark.parametrize(
    ("resources", "said"),
    [
        # A limit over the LimitRange's max: LimitRanger refuses it.
        ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
         "is forbidden: maximum cpu usage per Container is 1, but limit is 2"),
        # No limits: the max becomes the default limit, below the PS's default request of 2Gi (pod validation).
        (None, 'is invalid: spec.containers[0].resources.requests: Invalid value: "2Gi": must be less than or equal '
               "to memory limit of 1Gi"),
    ],
)  # fmt: skip
async def test_a_pod_over_a_limit_range_is_degraded_with_the_api_message(
    api, fake_ps, node_root, resources, said
) -> None:
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits", "namespace": NAMESPACE},
              "spec": {"limits": [{"type": "Container", "max": {"cpu": "1", "memory": "1Gi"}}]}}  # fmt: skip
    await create(api, limits)
    cond = await _degraded_with(api, fake_ps, Kubelet(api, node_root), {"resources": resources} if resources else {})
    assert cond["reason"] == "FailedCreate"
    assert cond["message"].startswith("Deployment demo-ps cannot create its pod: ")
    assert said in cond["message"] and "LimitRange" in cond["message"]


async def test_an_image_the_registry_lacks_is_degraded_as_a_pull_failure(api, fake_ps, node_root) -> None:
    image = "registry.example/geofed/ps:missing"
    kubelet = Kubelet(api, node_root, missing_images=frozenset({image}))
    cond = await _degraded_with(api, fake_ps, kubelet, {"image": image})
    assert cond["reason"] in ("ErrImagePull", "ImagePullBackOff")
    assert image in cond["message"] and "imagePullSecrets" in cond["message"]


async def test_a_claim_without_a_storage_class_is_degraded_as_claim_pending(api, fake_ps, node_root) -> None:
    """No default StorageClass: the checkpoint claim stays Pending and the scheduler cannot place the pod."""
    cond = await _degraded_with(api, fake_ps, Kubelet(api, node_root, default_class=False), {})
    assert cond["reason"] == "ClaimPending"
    assert "'demo-checkpoints' is Pending" in cond["message"]
    assert "unbound immediate PersistentVolumeClaims" in cond["message"]  # the scheduler's own words
    assert "storageClassName" in cond["message"]


async def test_a_pod_larger_than_any_node_is_degraded_as_unschedulable(api, fake_ps, node_root) -> None:
    kubelet = Kubelet(api, node_root, allocatable={"cpu": "2", "memory": "8Gi"})
    cond = await _degraded_with(api, fake_ps, kubelet, {"resources": {"requests": {"cpu": "4"}}})
    assert cond["reason"] == "Unschedulable"
    assert "0/1 nodes are available: 1 Insufficient cpu" in cond["message"]
    assert "spec.resources" in cond["message"]


async def test_a_crashing_ps_is_degraded_as_a_crash_loop(api, fake_ps, node_root) -> None:
    kubelet = Kubelet(api, node_root, runtime=ExitingRuntime())
    cond = await _degraded_with(api, fake_ps, kubelet, {})
    assert cond["reason"] == "CrashLoopBackOff"
    assert "back-off restarting failed container ps" in cond["message"] and "--previous" in cond["message"]


async def test_a_shard_whose_pod_is_refused_is_degraded_naming_the_shard(api, fake_ps) -> None:
    """psShards 2: the front and shard 0 roll out; shard 1's pod is refused. The test plays the Deployment
    controller (no node), writing the ReplicaFailure condition as the test node's controller does above."""
    refused = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": 'pods "demo-ps-shard-1-abc" is forbidden: exceeded quota: shards, requested: '
                          'requests.memory=8Gi'}  # fmt: skip
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, {**FED, "spec": {**FED["spec"], "psShards": 2}})
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps-shard-1"), what="shard 1")
        await patch(api, "apps/v1", "Deployment", NAMESPACE, "demo-ps-shard-1",
                    {"status": {"conditions": [refused]}}, status=True)  # fmt: skip
        cond = await rolled_out_until(api, {"demo-ps", "demo-ps-shard-0"}, lambda: _degraded(api), "Degraded")
    assert runner.exception is None
    assert cond["reason"] == "FailedCreate"
    assert cond["message"].startswith("PS shard 1: Deployment demo-ps-shard-1 cannot create its pod: pods ")
    assert "exceeded quota: shards" in cond["message"]
