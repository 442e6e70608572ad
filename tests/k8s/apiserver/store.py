"""The object store: kmock's `objects` with resourceVersions, and the event log watches read from."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from typing import Any

import kmock
from kmock._internal import k8s_views, references

from . import registry
from .registry import ResourceType


def now(offset: float = 0.0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """Objects by (resource, namespace, name) in kmock's ObjectsArray; every change logged as a watch event."""

    _objects: k8s_views.ObjectsArray
    registry: registry.Registry
    _log: list[tuple[int, str, dict[str, Any]]]  # (resourceVersion, type key, watch event)
    _changed: asyncio.Condition | None
    _applied: dict[tuple[str, str], Any]
    last_rv: int
    resources: Any  # kmock's declared resources (discovery)

    def _declare(self, rtype: ResourceType) -> None:
        self.registry.add(rtype)
        self.resources[rtype.key] = kmock.ResourceInfo(
            kind=rtype.kind, singular=rtype.singular or rtype.kind.lower(), namespaced=rtype.namespaced,
            shortnames=set(rtype.short_names), categories=set(rtype.categories),
            verbs={"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
            subresources=set(rtype.subresources),
        )  # fmt: skip

    def _resource(self, rtype: ResourceType) -> references.resource:
        return references.resource(group=rtype.group, version=rtype.version, plural=rtype.plural)

    def get_object(self, rtype: ResourceType, ns: str | None, name: str) -> dict[str, Any] | None:
        key = (self._resource(rtype), ns, name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        return copy.deepcopy(self._objects[key].raw)

    def list_objects(self, rtype: ResourceType, ns: str | None = None) -> list[dict[str, Any]]:
        wanted = self._resource(rtype)
        return [
            copy.deepcopy(obj.raw)
            for (resource, namespace, _), obj in list(self._objects.items())
            if resource == wanted and not obj.deleted and (ns is None or namespace == ns)
        ]

    def all_objects(self) -> list[tuple[ResourceType, dict[str, Any]]]:
        """Every live object of every served type (a type's every version holds the same objects)."""
        found = []
        for (resource, _ns, _name), obj in list(self._objects.items()):
            rtype = self.registry.get(resource.group or "", resource.version or "", resource.plural or "")
            if rtype is not None and not obj.deleted:
                found.append((rtype, obj.raw))
        return found

    def next_rv(self) -> str:
        self.last_rv = next(self._rv)
        return str(self.last_rv)

    def _store(self, rtype: ResourceType, ns: str | None, name: str, obj: dict[str, Any], event: str) -> None:
        key = (self._resource(rtype), ns, name)
        if key in self._objects:
            self._objects[key].create(obj)
        else:
            self._objects[key] = obj
        if rtype.plural == "customresourcedefinitions" and not obj["metadata"].get("deletionTimestamp"):
            for served in registry.crd_types(obj):  # a CRD written through the API is served as it says
                self._declare(served)
        self._emit(rtype, event, obj)

    def remove(self, rtype: ResourceType, ns: str | None, name: str) -> None:
        """Delete an object from storage for good (a DELETED event)."""
        key = (self._resource(rtype), ns, name)
        obj = copy.deepcopy(self._objects[key].raw)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self._objects[key].delete()
        if rtype.plural == "customresourcedefinitions":
            for served in registry.crd_types(obj):
                self.registry.types.pop((served.group, served.version, served.plural), None)
                self.resources.pop(served.key, None)
        self._applied = {k: v for k, v in self._applied.items() if k[0] != obj["metadata"].get("uid")}
        self._emit(rtype, "DELETED", obj)

    def replace(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """Store a new version of an existing object written by a controller (new resourceVersion)."""
        obj["metadata"]["resourceVersion"] = self.next_rv()
        md = obj["metadata"]
        self._store(rtype, md.get("namespace") if rtype.namespaced else None, md["name"], obj, "MODIFIED")

    def _emit(self, rtype: ResourceType, event: str, obj: dict[str, Any]) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._log.append((rv, rtype.plural + "." + rtype.group, {"type": event, "object": copy.deepcopy(obj)}))
        if self._changed is not None:
            changed = self._changed

            async def wake() -> None:
                async with changed:
                    changed.notify_all()

            asyncio.get_running_loop().create_task(wake())
