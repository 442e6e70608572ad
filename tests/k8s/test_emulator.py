"""The emulator's additions behave like an API server (the operator tests rely on them)."""

from __future__ import annotations

import pytest

from geofed_operator.kube import resource_path

from .emulator import GeofedEmulator
from .objects import create, get, names_of, patch

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
NS = "emu"


def _cm(name: str, labels: dict[str, str] | None = None, owner_uid: str | None = None) -> dict:
    meta: dict = {"name": name, "namespace": NS, "labels": labels or {}}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


@pytest.fixture(autouse=True)
def _namespace(api: GeofedEmulator) -> None:
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})


DEPLOYMENT_SPEC = {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                   "template": {"metadata": {"labels": {"app": "d"}},
                                "spec": {"containers": [{"name": "c", "image": "i"}]}}}  # fmt: skip


async def test_resource_version_generation_and_status_subresource(api: GeofedEmulator) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": NS},
                  "spec": DEPLOYMENT_SPEC, "status": {"readyReplicas": 9}}  # fmt: skip
    created = await create(api, deployment)
    rv, uid = created["metadata"]["resourceVersion"], created["metadata"]["uid"]
    assert created["metadata"]["generation"] == 1 and uid and "status" not in created
    changed = await patch(api, "apps/v1", "Deployment", NS, "d", {"spec": {"replicas": 2}, "status": {"x": 1}})
    assert changed["metadata"]["generation"] == 2 and int(changed["metadata"]["resourceVersion"]) > int(rv)
    assert "status" not in changed  # the main resource ignores status, as with a status subresource
    status = await patch(api, "apps/v1", "Deployment", NS, "d", {"status": {"readyReplicas": 1}}, status=True)
    assert status["status"] == {"readyReplicas": 1} and status["metadata"]["generation"] == 2


async def test_failed_json_patch_test_is_422(api: GeofedEmulator) -> None:
    await create(api, _cm("a"))
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "stale"},
        {"op": "add", "path": "/data/x", "value": "1"},
    ]
    headers = {"Content-Type": "application/json-patch+json"}
    async with api.patch(resource_path("v1", "ConfigMap", NS, "a"), json=ops, headers=headers) as resp:
        assert resp.status == 422
    assert "x" not in get(api, "v1/configmaps", NS, "a")["data"]


async def test_label_selector_and_garbage_collection(api: GeofedEmulator) -> None:
    owner = await create(api, _cm("owner"))
    await create(api, _cm("child", {"app": "x"}, owner_uid=owner["metadata"]["uid"]))
    await create(api, _cm("other", {"app": "y"}))
    async with api.get(resource_path("v1", "ConfigMap", NS), params={"labelSelector": "app=x"}) as resp:
        assert [o["metadata"]["name"] for o in (await resp.json())["items"]] == ["child"]
    async with api.delete(resource_path("v1", "ConfigMap", NS, "owner")) as resp:
        assert resp.status == 200
    assert names_of(api, "v1/configmaps", NS) == {"other"}  # the dependent went with its owner
