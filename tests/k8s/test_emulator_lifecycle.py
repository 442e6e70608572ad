"""Deletion as a kube-apiserver does it: finalizers, graceful pod deletion, garbage collection, namespaces.

Expected behaviour per the Kubernetes documentation (Finalizers, Garbage Collection, Pod termination,
Namespaces) and the API server's messages.
"""

from __future__ import annotations

from typing import Any

import pytest

from geofed_operator.kube import resource_path

from .emulator import GeofedEmulator
from .objects import call, create, get

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
NS = "life"


@pytest.fixture(autouse=True)
def _namespace(api: GeofedEmulator) -> None:
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})


def cm(name: str, ns: str = NS, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, **meta},
        "data": {"k": "v"},
    }


def pod(name: str, node: str | None = "node-1", grace: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def owner_ref(owner: dict[str, Any], block: bool = False) -> dict[str, Any]:
    md = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": md["name"], "uid": md["uid"],
            "blockOwnerDeletion": block}  # fmt: skip


CM = resource_path("v1", "ConfigMap", NS, "held")
MERGE = "application/merge-patch+json"


async def test_finalizers_hold_an_object_until_the_last_is_removed(api: GeofedEmulator) -> None:
    await create(api, cm("held", finalizers=["example.com/a", "example.com/b"]))
    status, body = await call(api, "DELETE", CM)
    assert (
        status == 202 and body["metadata"]["deletionTimestamp"] and body["metadata"]["deletionGracePeriodSeconds"] == 0
    )
    assert get(api, "v1/configmaps", NS, "held")["metadata"]["deletionTimestamp"]

    status, body = await call(
        api, "PATCH", CM, {"metadata": {"finalizers": ["example.com/a", "example.com/b", "x.io/new"]}}, MERGE
    )
    assert status == 422
    assert body["message"] == (
        'ConfigMap "held" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object '
        'is being deleted, found new finalizers []string{"x.io/new"}'
    )
    status, _ = await call(api, "PATCH", CM, {"metadata": {"finalizers": ["example.com/b"]}}, MERGE)
    assert status == 200 and get(api, "v1/configmaps", NS, "held") is not None
    status, _ = await call(api, "PATCH", CM, {"metadata": {"finalizers": None}}, MERGE)
    assert status == 200
    assert get(api, "v1/configmaps", NS, "held") is None
    assert (await call(api, "GET", CM))[0] == 404


async def test_a_pod_terminates_gracefully_until_the_kubelet_deletes_it(api: GeofedEmulator) -> None:
    path = resource_path("v1", "Pod", NS, "p")
    await create(api, pod("p", grace=60))
    status, body = await call(api, "DELETE", path)
    assert status == 202 and body["metadata"]["deletionGracePeriodSeconds"] == 60
    stored = get(api, "v1/pods", NS, "p")
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 60 and stored["metadata"]["deletionTimestamp"]
    await call(api, "DELETE", path, {"gracePeriodSeconds": 5})  # a shorter grace shortens it
    assert get(api, "v1/pods", NS, "p")["metadata"]["deletionGracePeriodSeconds"] == 5
    await call(api, "DELETE", path, {"gracePeriodSeconds": 90})  # a longer one does not lengthen it
    assert get(api, "v1/pods", NS, "p")["metadata"]["deletionGracePeriodSeconds"] == 5
    status, _ = await call(api, "DELETE", path, {"gracePeriodSeconds": 0})  # the kubelet, containers gone
    assert status == 200 and get(api, "v1/pods", NS, "p") is None


async def test_pod_grace_defaults_and_immediate_cases(api: GeofedEmulator) -> None:
    await create(api, pod("default-grace"))
    await call(api, "DELETE", resource_path("v1", "Pod", NS, "default-grace"))
    assert get(api, "v1/pods", NS, "default-grace")["metadata"]["deletionGracePeriodSeconds"] == 30
    await create(api, pod("unbound", node=None, grace=60))  # never scheduled: nothing to stop
    await call(api, "DELETE", resource_path("v1", "Pod", NS, "unbound"))
    assert get(api, "v1/pods", NS, "unbound") is None
    await create(api, pod("done", grace=60))
    status_path = resource_path("v1", "Pod", NS, "done", "status")
    assert (await call(api, "PATCH", status_path, {"status": {"phase": "Succeeded"}}, MERGE))[0] == 200
    await call(api, "DELETE", resource_path("v1", "Pod", NS, "done"))
    assert get(api, "v1/pods", NS, "done") is None


async def test_garbage_collection_background_foreground_orphan(api: GeofedEmulator) -> None:
    owner = await create(api, cm("owner"))
    await create(api, cm("child", ownerReferences=[owner_ref(owner)]))
    await call(api, "DELETE", resource_path("v1", "ConfigMap", NS, "owner"))
    assert get(api, "v1/configmaps", NS, "child") is None  # background: the dependent follows

    owner = await create(api, cm("fg"))
    await create(api, cm("fg-child", ownerReferences=[owner_ref(owner, block=True)], finalizers=["example.com/hold"]))
    await call(api, "DELETE", resource_path("v1", "ConfigMap", NS, "fg"), {"propagationPolicy": "Foreground"})
    held = get(api, "v1/configmaps", NS, "fg")
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"] and held["metadata"]["deletionTimestamp"]
    assert get(api, "v1/configmaps", NS, "fg-child")["metadata"]["deletionTimestamp"]
    await call(
        api, "PATCH", resource_path("v1", "ConfigMap", NS, "fg-child"), {"metadata": {"finalizers": None}}, MERGE
    )
    assert get(api, "v1/configmaps", NS, "fg-child") is None and get(api, "v1/configmaps", NS, "fg") is None

    owner = await create(api, cm("orph"))
    await create(api, cm("orph-child", ownerReferences=[owner_ref(owner)]))
    await call(api, "DELETE", resource_path("v1", "ConfigMap", NS, "orph"), {"propagationPolicy": "Orphan"})
    assert get(api, "v1/configmaps", NS, "orph") is None
    assert get(api, "v1/configmaps", NS, "orph-child")["metadata"].get("ownerReferences") == []


async def test_a_batch_v1_job_orphans_its_pods_unless_told_otherwise(api: GeofedEmulator) -> None:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}
    for name in ("j1", "j2"):
        job = await create(api, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
                                 "spec": {"template": template}})  # fmt: skip
        child = pod(f"{name}-pod", node=None)
        child["metadata"]["ownerReferences"] = [owner_ref(job)]
        await create(api, child)
    await call(api, "DELETE", resource_path("batch/v1", "Job", NS, "j1"))
    await call(api, "DELETE", resource_path("batch/v1", "Job", NS, "j2"), {"propagationPolicy": "Background"})
    assert get(api, "batch/v1/jobs", NS, "j1") is None and get(api, "v1/pods", NS, "j1-pod") is not None
    assert get(api, "v1/pods", NS, "j2-pod") is None


async def test_deleting_a_namespace_deletes_its_content_and_waits_for_finalizers(api: GeofedEmulator) -> None:
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}})
    await create(api, cm("plain", ns="doomed"))
    await create(api, cm("held", ns="doomed", finalizers=["example.com/hold"]))
    status, _ = await call(api, "DELETE", "/api/v1/namespaces/doomed")
    assert status == 202
    ns = get(api, "v1/namespaces", None, "doomed")
    assert ns["status"]["phase"] == "Terminating" and ns["spec"]["finalizers"] == ["kubernetes"]
    assert get(api, "v1/configmaps", "doomed", "plain") is None
    status, body = await call(api, "POST", resource_path("v1", "ConfigMap", "doomed"), cm("late", ns="doomed"))
    assert status == 403
    assert (
        body["message"]
        == 'configmaps "late" is forbidden: unable to create new content in namespace doomed because it is being '
        "terminated"
    )
    await call(
        api, "PATCH", resource_path("v1", "ConfigMap", "doomed", "held"), {"metadata": {"finalizers": []}}, MERGE
    )
    assert get(api, "v1/namespaces", None, "doomed") is None
    status, body = await call(api, "POST", resource_path("v1", "ConfigMap", "nowhere"), cm("x", ns="nowhere"))
    assert status == 404 and body["message"] == 'namespaces "nowhere" not found'


async def test_stale_resource_versions_conflict(api: GeofedEmulator) -> None:
    created = await create(api, cm("rv"))
    path = resource_path("v1", "ConfigMap", NS, "rv")
    stale = created["metadata"]["resourceVersion"]
    assert (await call(api, "PATCH", path, {"data": {"k": "2"}}, MERGE))[0] == 200
    message = (
        'Operation cannot be fulfilled on configmaps "rv": the object has been modified; please apply your changes '
        "to the latest version and try again"
    )
    status, body = await call(api, "PUT", path, {**created, "data": {"k": "3"}})
    assert (status, body["reason"], body["message"]) == (409, "Conflict", message)
    status, body = await call(api, "PATCH", path, {"metadata": {"resourceVersion": stale}, "data": {"k": "4"}}, MERGE)
    assert (status, body["message"]) == (409, message)
    assert get(api, "v1/configmaps", NS, "rv")["data"] == {"k": "2"}
    current = get(api, "v1/configmaps", NS, "rv")
    status, body = await call(api, "PUT", path, {**current, "data": {"k": "5"}})
    assert status == 200 and int(body["metadata"]["resourceVersion"]) > int(current["metadata"]["resourceVersion"])


async def test_a_custom_resource_put_needs_a_resource_version(api: GeofedEmulator) -> None:
    from .test_operator_federation import FED

    fed = {**FED, "metadata": {**FED["metadata"], "namespace": NS}}
    created = await create(api, fed)
    del created["metadata"]["resourceVersion"]
    status, body = await call(api, "PUT", resource_path("geofed.io/v1alpha1", "Federation", NS, "demo"), created)
    assert status == 422
    assert (
        body["message"] == 'Federation.geofed.io "demo" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )


async def test_deleting_a_crd_deletes_its_resources_first(api: GeofedEmulator) -> None:
    from .test_operator_federation import FED

    fed = {**FED, "metadata": {**FED["metadata"], "namespace": NS, "finalizers": ["geofed.io/cleanup"]}}
    await create(api, fed)
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/federations.geofed.io"
    crd = get(api, "apiextensions.k8s.io/v1/customresourcedefinitions", None, "federations.geofed.io")
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    assert (await call(api, "DELETE", crd_path))[0] == 202
    assert get(api, "geofed.io/v1alpha1/federations", NS, "demo")["metadata"]["deletionTimestamp"]
    assert get(api, "apiextensions.k8s.io/v1/customresourcedefinitions", None, "federations.geofed.io")  # waits
    fed_path = resource_path("geofed.io/v1alpha1", "Federation", NS, "demo")
    assert (await call(api, "PATCH", fed_path, {"metadata": {"finalizers": None}}, MERGE))[0] == 200
    assert get(api, "apiextensions.k8s.io/v1/customresourcedefinitions", None, "federations.geofed.io") is None
    assert (await call(api, "GET", resource_path("geofed.io/v1alpha1", "Federation", NS)))[0] == 404  # not served
