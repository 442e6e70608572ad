"""Helpers to read and write objects in the emulator through its HTTP API, as a client would."""

from __future__ import annotations

import json
from typing import Any

import kmock

from geofed_operator.kube import resource_path

from .emulator import GeofedEmulator


def path_of(api: GeofedEmulator, obj: dict[str, Any], namespace: str | None = None) -> str:
    """The collection URL of `obj`'s kind (any kind the emulator serves) in its namespace."""
    rtype = api.registry.by_kind(obj["apiVersion"], obj["kind"])
    assert rtype is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
    base = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
    ns = namespace or obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{rtype.plural}" if rtype.namespaced else f"{base}/{rtype.plural}"


async def create(api: GeofedEmulator, obj: dict[str, Any]) -> dict[str, Any]:
    """POST an object (like kubectl create)."""
    async with api.post(path_of(api, obj), json=obj) as resp:
        assert resp.status < 300, await resp.text()
        return await resp.json()


async def patch(
    api: GeofedEmulator, api_version: str, kind: str, ns: str, name: str, body: dict[str, Any], status: bool = False
) -> dict[str, Any]:
    """Merge-patch an object or its status (simulating what a controller or the kubelet would write)."""
    path = resource_path(api_version, kind, ns, name, "status" if status else None)
    headers = {"Content-Type": "application/merge-patch+json"}
    async with api.patch(path, json=body, headers=headers) as resp:
        assert resp.status < 300, await resp.text()
        return await resp.json()


async def delete(api: GeofedEmulator, api_version: str, kind: str, ns: str, name: str) -> None:
    """DELETE an object (like kubectl delete)."""
    async with api.delete(resource_path(api_version, kind, ns, name)) as resp:
        assert resp.status < 300, await resp.text()


def get(api: GeofedEmulator, plural_key: str, ns: str, name: str) -> dict[str, Any] | None:
    """The stored object (None if absent or deleted); `plural_key` like 'v1/secrets'."""
    try:
        obj = api.objects[plural_key, ns, name]
    except KeyError:
        return None
    return None if obj.deleted else obj.raw


def names_of(api: GeofedEmulator, plural_key: str, ns: str) -> set[str]:
    """Names of the live objects of one resource (`plural_key` like 'batch/v1/jobs') in one namespace."""
    wanted = kmock.resource(plural_key)
    return {
        name
        for (resource, namespace, name), obj in list(api.objects.items())
        if resource == wanted and namespace == ns and not obj.deleted
    }


async def call(
    api: GeofedEmulator,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    token: str | None = None,
    params: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One raw request (as `token`'s user, else the harness's admin); (HTTP status, decoded JSON body)."""
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with api.request(method, path, json=body, headers=headers, params=params or {}) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:
            return resp.status, text
