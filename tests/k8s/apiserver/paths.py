"""Request paths as the API server reads them: group, version, namespace, resource, name, subresource, verb."""

from __future__ import annotations

import dataclasses

from kmock._internal import parsing


@dataclasses.dataclass
class RequestInfo:
    group: str
    version: str | None  # None: a group's discovery document (`/apis/geofed.io`)
    plural: str | None  # None: a discovery document (`/api/v1`, `/apis/geofed.io/v1alpha1`)
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    verb: str = ""


def parse(method: str, path: str, query: dict[str, str]) -> RequestInfo | None:
    """The request's resource, or None for non-resource paths (`/openapi/v2`, `/version`, `/apis`)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    elif len(parts) == 2 and parts[0] == "apis":
        return RequestInfo(parts[1], None, None)  # a group's discovery document
    else:
        return None
    info = RequestInfo(group, version, None)
    if not rest:
        return info
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        info.namespace, rest = rest[1], rest[2:]
    info.plural = rest[0]
    info.name = rest[1] if len(rest) > 1 else None
    info.subresource = "/".join(rest[2:]) or None
    if info.plural == "namespaces" and info.name:
        info.namespace = info.name  # a namespace is its own namespace for authorization
    named = info.name is not None
    watching = query.get("watch") in ("true", "1")
    info.verb = {
        "GET": "watch" if watching else ("get" if named else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }.get(method.upper(), method.lower())
    if info.subresource and method.upper() == "POST":
        info.verb = "create"
    return info


_KMOCK_PARSE = parsing.parse_path


def kmock_parse_path(path: str) -> parsing.ParsedPath:
    """kmock's request parsing with this module's reading of resource paths (kmock fails on `/api/v1/namespaces`)."""
    info = parse("GET", path, {})
    if info is None:
        return _KMOCK_PARSE(path)
    namespace = None if info.plural == "namespaces" else info.namespace
    return parsing.ParsedPath(info.group, info.version, info.plural, namespace, info.name, info.subresource)


parsing.parse_path = kmock_parse_path  # kmock's Request._parse looks it up here, for every request it records
