"""Compute ResourceQuotas and LimitRanges, as a kube-apiserver admits pods against them.

The expected messages are the ResourceQuota admission plugin's (`exceeded quota: ...`, and pods.go's
`failed quota: <name>: must specify ...`), the LimitRanger plugin's (`maximum cpu usage per Container
is 1, but limit is 2`, ...) and the pod validation's `must be less than or equal to cpu limit of ...`;
quantities print in their canonical form (`1000m` -> `1`).
"""

from __future__ import annotations

from typing import Any

import pytest

from geofed_operator.kube import resource_path

from .conftest import NAMESPACE
from .emulator import GeofedEmulator
from .objects import call, create, get, patch

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]


def pod(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
        init: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "resources": resources}]}
    if init is not None:
        spec["initContainers"] = [{"name": "init", "image": "i", **init}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"hard": hard, **spec}}  # fmt: skip


def limit_range(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits", "namespace": NAMESPACE},
            "spec": {"limits": list(items)}}  # fmt: skip


async def post(api: GeofedEmulator, obj: dict[str, Any]) -> tuple[int, Any]:
    return await call(api, "POST", resource_path("v1", "Pod", NAMESPACE), obj)


async def refused(api: GeofedEmulator, obj: dict[str, Any], code: int = 403) -> str:
    status, body = await post(api, obj)
    assert status == code, body
    assert get(api, "v1/pods", NAMESPACE, obj["metadata"]["name"]) is None
    return str(body["message"])


async def test_a_pod_over_the_compute_quota_is_refused_and_an_admitted_one_counts(api: GeofedEmulator) -> None:
    await create(api, quota("compute", {"requests.cpu": "2", "limits.memory": "1Gi"}))
    assert (await post(api, pod("p1", {"cpu": "1000m"}, {"memory": "512Mi"})))[0] == 201
    assert await refused(api, pod("p2", {"cpu": "2"}, {"memory": "512Mi"})) == (
        'pods "p2" is forbidden: exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=1, '
        "limited: requests.cpu=2"
    )
    assert await refused(api, pod("p2", {"cpu": "1.5"}, {"memory": "1Gi"})) == (
        'pods "p2" is forbidden: exceeded quota: compute, requested: limits.memory=1Gi,requests.cpu=1500m, '
        "used: limits.memory=512Mi,requests.cpu=1, limited: limits.memory=1Gi,requests.cpu=2"
    )
    assert (await post(api, pod("p2", {"cpu": "1"}, {"memory": "512Mi"})))[0] == 201  # exactly at the limit
    assert await refused(api, pod("p3", {"cpu": "100m"}, {"memory": "1Mi"})) == (
        'pods "p3" is forbidden: exceeded quota: compute, requested: limits.memory=1Mi,requests.cpu=100m, '
        "used: limits.memory=1Gi,requests.cpu=2, limited: limits.memory=1Gi,requests.cpu=2"
    )


async def test_a_pod_that_does_not_name_a_quota_resource_is_refused(api: GeofedEmulator) -> None:
    """pods.go's Constraints: every container (init containers too) must name a quota'd cpu/memory resource;
    a limit alone is also the request (Pod defaulting); extended resources need not be named."""
    await create(api, quota("compute", {"limits.cpu": "4", "requests.memory": "4Gi", "requests.nvidia.com/gpu": "1"}))
    assert await refused(api, pod("ps", {"memory": "1Gi"}, init={})) == (
        'pods "ps" is forbidden: failed quota: compute: must specify limits.cpu for: c,init; requests.memory for: init'
    )
    assert (await post(api, pod("ps", None, {"cpu": "1", "memory": "1Gi"})))[0] == 201


async def test_terminal_pods_and_the_init_container_rule(api: GeofedEmulator) -> None:
    """A Succeeded pod no longer counts; a pod's request is its containers' sum or its largest init container."""
    await create(api, quota("compute", {"cpu": "2"}))
    assert (await post(api, pod("init-heavy", {"cpu": "1"}, init={"resources": {"requests": {"cpu": "2"}}})))[0] == 201
    assert await refused(api, pod("next", {"cpu": "500m"})) == (
        'pods "next" is forbidden: exceeded quota: compute, requested: cpu=500m, used: cpu=2, limited: cpu=2'
    )
    await patch(api, "v1", "Pod", NAMESPACE, "init-heavy", {"status": {"phase": "Succeeded"}}, status=True)
    assert (await post(api, pod("next", {"cpu": "2"})))[0] == 201


async def test_extended_resources_are_quota_d_as_requests(api: GeofedEmulator) -> None:
    await create(api, quota("gpu", {"requests.nvidia.com/gpu": "1"}))
    assert await refused(api, pod("trainer", None, {"nvidia.com/gpu": "2"})) == (
        'pods "trainer" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=2, '
        "used: requests.nvidia.com/gpu=0, limited: requests.nvidia.com/gpu=1"
    )
    assert (await post(api, pod("cpu-only", {"cpu": "1"})))[0] == 201


async def test_a_scoped_quota_counts_only_the_pods_it_selects(api: GeofedEmulator) -> None:
    await create(api, quota("best-effort", {"pods": "0"}, scopes=["BestEffort"]))
    assert (await post(api, pod("burstable", {"cpu": "1"})))[0] == 201
    assert "exceeded quota: best-effort, requested: pods=1" in await refused(api, pod("plain"))


async def test_limit_range_defaults_are_applied_then_counted_by_the_quota(api: GeofedEmulator) -> None:
    await create(api, limit_range({"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"},
                                   "defaultRequest": {"cpu": "250m"}}))  # fmt: skip
    stored = get(api, "v1/limitranges", NAMESPACE, "limits")
    assert stored is not None and stored["spec"]["limits"][0]["defaultRequest"] == {"cpu": "250m", "memory": "256Mi"}
    await create(api, quota("compute", {"requests.cpu": "1", "limits.cpu": "2"}))
    assert (await post(api, pod("a")))[0] == 201
    made = get(api, "v1/pods", NAMESPACE, "a")
    assert made is not None and made["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}}  # fmt: skip
    assert made["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    )
    assert (await post(api, pod("b", None, {"cpu": "500m"})))[0] == 201  # its request is its limit, not 250m
    assert (await post(api, pod("c")))[0] == 201
    assert await refused(api, pod("d")) == (
        'pods "d" is forbidden: exceeded quota: compute, requested: requests.cpu=250m, used: requests.cpu=1, '
        "limited: requests.cpu=1"
    )


async def test_limit_range_min_max_and_ratio_are_enforced(api: GeofedEmulator) -> None:
    await create(api, limit_range({"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"},
                                   "maxLimitRequestRatio": {"cpu": "2"}},
                                  {"type": "Pod", "max": {"memory": "1Gi"}}))  # fmt: skip
    assert await refused(api, pod("big", {"cpu": "1", "memory": "128Mi"}, {"cpu": "2", "memory": "128Mi"})) == (
        'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    )
    assert await refused(api, pod("odd", {"cpu": "100m", "memory": "32Mi"}, {"cpu": "1000m", "memory": "64Mi"})) == (
        'pods "odd" is forbidden: [minimum memory usage per Container is 64Mi, but request is 32Mi, '
        "cpu max limit to request ratio per Container is 2, but provided ratio is 10.000000]"
    )
    init = {"resources": {"limits": {"memory": "2Gi"}}}  # the pod's total is its largest init container's
    huge = pod("huge", {"cpu": "500m", "memory": "64Mi"}, {"cpu": "1", "memory": "512Mi"}, init)
    assert await refused(api, huge) == 'pods "huge" is forbidden: maximum memory usage per Pod is 1Gi, but limit is 2Gi'
    # max cpu 1 became the default limit (and request): a larger request is invalid before LimitRanger checks it
    assert await refused(api, pod("greedy", {"cpu": "2", "memory": "64Mi"}, {"memory": "1Gi"}), 422) == (
        'Pod "greedy" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
        "must be less than or equal to cpu limit of 1"
    )
    assert (await post(api, pod("fits", {"cpu": "500m", "memory": "64Mi"}, {"memory": "1Gi"})))[0] == 201
