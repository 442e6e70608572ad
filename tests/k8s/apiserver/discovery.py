"""Discovery documents (`/api`, `/api/v1`, `/apis`, `/apis/<group>[/<version>]`) in the legacy, unaggregated form.

A real server also serves the aggregated form (`as=APIGroupDiscoveryList`) that kubectl asks for
first; kubectl, helm and kopf fall back to these when the answer is not of that type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .registry import ResourceType

if TYPE_CHECKING:
    from .server import GeofedEmulator

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"], "finalize": ["update"],
                     "token": ["create"], "eviction": ["create"], "log": ["get"]}  # fmt: skip


def _resources(types: list[ResourceType]) -> list[dict[str, Any]]:
    listed = []
    for rtype in sorted(types, key=lambda t: t.plural):
        entry = {"name": rtype.plural, "singularName": rtype.singular or rtype.kind.lower(),
                 "namespaced": rtype.namespaced, "kind": rtype.kind, "verbs": VERBS}  # fmt: skip
        if rtype.short_names:
            entry["shortNames"] = rtype.short_names
        if rtype.categories:
            entry["categories"] = rtype.categories
        listed.append(entry)
        for sub in sorted(rtype.subresources):
            kind = {"token": "TokenRequest", "eviction": "Eviction", "scale": "Scale"}.get(sub, rtype.kind)
            listed.append({"name": f"{rtype.plural}/{sub}", "singularName": "", "namespaced": rtype.namespaced,
                           "kind": kind, "verbs": SUBRESOURCE_VERBS.get(sub, ["get"])})  # fmt: skip
    return listed


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def serve(server: GeofedEmulator, group: str, version: str | None, legacy: bool) -> dict[str, Any] | None:
    """The discovery document for a path (`legacy`: under /api), or None if the group or version is not served."""
    types = list(server.registry.types.values())
    if legacy and version is None:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if not legacy and not group:
        groups: dict[str, list[str]] = {}
        for rtype in types:
            if rtype.group and rtype.version not in groups.setdefault(rtype.group, []):
                groups[rtype.group].append(rtype.version)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g, v) for g, v in sorted(groups.items())]}
    if version is None:
        versions = sorted({t.version for t in types if t.group == group})
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)} if versions else None
    served = [t for t in types if t.group == group and t.version == version]
    if not served:
        return None
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": _resources(served),
    }
