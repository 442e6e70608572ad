"""The OpenAPI documents kubectl and helm read: `/openapi/v2` and `/openapi/v3[/<group-version>]`.

Built from the built-in types kubernetes-validate ships (1.32) and the served CRDs' schemas. Each
served resource has its paths with get/put/patch/delete operations carrying
`x-kubernetes-group-version-kind` and the `fieldValidation`, `fieldManager`, `dryRun` and `force`
query parameters, which is how kubectl decides to use server-side field validation. `/openapi/v2`
is served as JSON, and to a client that asks for protobuf only (kubectl) as a protobuf document without
paths or definitions (see `v2_protobuf`). The real documents also describe every other operation
(list, watch, deletecollection, subresources) and every response type; these describe the types and the
object paths only.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import TYPE_CHECKING, Any

import aiohttp.web

from . import k8s_schemas

if TYPE_CHECKING:
    from .registry import ResourceType
    from .server import GeofedEmulator

PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for name in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")
]


def _convert(node: Any, prefix: str) -> Any:
    """A kubernetes-validate JSON-schema node as an OpenAPI schema node (refs under `prefix`)."""
    if isinstance(node, list):
        return [_convert(n, prefix) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out["$ref"] = prefix + value.rsplit("/", 1)[-1]
        elif key == "type" and isinstance(value, list):
            kinds = [v for v in value if v != "null"]
            if kinds:
                out["type"] = kinds[0]
        elif key == "oneOf" and isinstance(value, list):
            out["x-kubernetes-int-or-string"] = True
        elif key == "enum" and isinstance(value, list):
            out["enum"] = [v for v in value if v is not None]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _convert(sub, prefix) for name, sub in value.items()}  # names are not keywords
        else:
            out[key] = _convert(value, prefix)
    return out


@functools.cache
def builtin_schemas(prefix: str) -> dict[str, Any]:
    return {name: _convert(node, prefix) for name, node in k8s_schemas.definitions().items()}


def _crd_name(rtype: ResourceType) -> str:
    reversed_group = ".".join(reversed(rtype.group.split(".")))
    return f"{reversed_group}.{rtype.version}.{rtype.kind}"


def _crd_schema(rtype: ResourceType, prefix: str) -> dict[str, Any]:
    node = copy.deepcopy(rtype.schema or {"type": "object"})
    props = node.setdefault("properties", {})
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"$ref": prefix + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    node["x-kubernetes-group-version-kind"] = [{"group": rtype.group, "version": rtype.version, "kind": rtype.kind}]
    return node


def _schema_name(rtype: ResourceType) -> str:
    if rtype.custom:
        return _crd_name(rtype)
    return k8s_schemas.definition_name(rtype.group, rtype.version, rtype.kind) or _crd_name(rtype)


def _paths(types: list[ResourceType], prefix: str, v3: bool) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rtype in types:
        base = f"/api/{rtype.version}" if not rtype.group else f"/apis/{rtype.group}/{rtype.version}"
        scope = "/namespaces/{namespace}" if rtype.namespaced else ""
        gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        ref = {"$ref": prefix + _schema_name(rtype)}
        response = {"content": {"application/json": {"schema": ref}}} if v3 else {"schema": ref}
        params = PARAMETERS if v3 else [{"name": p["name"], "in": "query", "type": "string", "uniqueItems": True}
                                        for p in PARAMETERS]  # fmt: skip
        item = {}
        for verb in ("get", "put", "patch", "delete"):
            item[verb] = {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": verb,
                          "parameters": params, "responses": {"200": {"description": "OK", **response}}}  # fmt: skip
        paths[f"{base}{scope}/{rtype.plural}/{{name}}"] = item
        paths[f"{base}{scope}/{rtype.plural}"] = {
            "post": {
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "post",
                "parameters": params,
                "responses": {"201": {"description": "Created", **response}},
            }  # fmt: skip
        }
    return paths


def _schemas(types: list[ResourceType], prefix: str) -> dict[str, Any]:
    schemas = dict(builtin_schemas(prefix))
    for rtype in types:
        if rtype.custom:
            schemas[_crd_name(rtype)] = _crd_schema(rtype, prefix)
    return schemas


def v2(server: GeofedEmulator) -> dict[str, Any]:
    types = list(server.registry.types.values())
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": f"v{k8s_schemas.KUBE_VERSION}"},
            "paths": _paths(types, "#/definitions/", v3=False),
            "definitions": _schemas(types, "#/definitions/")}  # fmt: skip


PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # the type a real server answers with


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths here stay under 128 bytes)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def v2_protobuf() -> bytes:
    """The gnostic `openapi_v2.Document` kubectl asks for: `swagger` and `info` only, no paths or definitions.

    kubectl needs the document to exist; it validates through the server (`fieldValidation`, found in the
    v3 documents) and, with no v2 definition of a type, falls back to its compiled-in patch metadata.
    """
    info = _field(1, b"Kubernetes") + _field(2, f"v{k8s_schemas.KUBE_VERSION}".encode())
    return _field(1, b"2.0") + _field(2, info)


def _group_versions(server: GeofedEmulator) -> dict[str, list[ResourceType]]:
    found: dict[str, list[ResourceType]] = {}
    for rtype in server.registry.types.values():
        key = f"api/{rtype.version}" if not rtype.group else f"apis/{rtype.group}/{rtype.version}"
        found.setdefault(key, []).append(rtype)
    return found


def v3(server: GeofedEmulator, group_version: str) -> dict[str, Any] | None:
    types = _group_versions(server).get(group_version)
    if types is None:
        return None
    prefix = "#/components/schemas/"
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": f"v{k8s_schemas.KUBE_VERSION}"},
            "paths": _paths(types, prefix, v3=True), "components": {"schemas": _schemas(types, prefix)}}  # fmt: skip


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()


async def serve(server: GeofedEmulator, path: str, accept: str) -> aiohttp.web.StreamResponse | None:
    """The response for an OpenAPI path, or None for any other path."""
    if path == "/openapi/v2":
        if "protobuf" in accept and "json" not in accept:
            return aiohttp.web.Response(body=v2_protobuf(), content_type=PROTOBUF_V2)
        return aiohttp.web.json_response(v2(server))
    if path in ("/openapi/v3", "/openapi/v3/"):
        listing = {}
        for group_version in _group_versions(server):
            doc = v3(server, group_version)
            assert doc is not None
            listing[group_version] = {"serverRelativeURL": f"/openapi/v3/{group_version}?hash={_digest(doc)}"}
        return aiohttp.web.json_response({"paths": listing})
    if path.startswith("/openapi/v3/"):
        doc = v3(server, path[len("/openapi/v3/") :])
        if doc is None:
            return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                              "message": "the server could not find the requested resource",
                                              "reason": "NotFound", "code": 404}, status=404)  # fmt: skip
        return aiohttp.web.json_response(doc, headers={"Cache-Control": "public, immutable"})
    return None
