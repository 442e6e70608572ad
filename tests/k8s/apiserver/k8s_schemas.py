"""The built-in types' OpenAPI schemas that kubernetes-validate ships (Kubernetes 1.32), by group/version/kind."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import kubernetes_validate

KUBE_VERSION = "1.32.0"
_DIR = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{KUBE_VERSION}-local"


@functools.cache
def definitions() -> dict[str, dict[str, Any]]:
    """Every definition, keyed by its OpenAPI name (`io.k8s.api.core.v1.Secret`)."""
    return json.loads((_DIR / "_definitions.json").read_text())["$defs"]


@functools.cache
def _by_gvk() -> dict[tuple[str, str, str], str]:
    index = {}
    for name, node in definitions().items():
        for gvk in node.get("x-kubernetes-group-version-kind") or []:
            index[gvk["group"], gvk["version"], gvk["kind"]] = name
    return index


def definition_name(group: str, version: str, kind: str) -> str | None:
    return _by_gvk().get((group, version, kind))


def schema_for(group: str, version: str, kind: str) -> dict[str, Any] | None:
    name = definition_name(group, version, kind)
    return definitions()[name] if name else None


def resolve(node: dict[str, Any] | None) -> dict[str, Any]:
    """Follow `$ref` (and a lone `allOf` wrapper) to the node it names."""
    while isinstance(node, dict):
        if "$ref" in node:
            node = definitions()[node["$ref"].rsplit("/", 1)[-1]]
        elif list(node) == ["allOf"] and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        else:
            return node
    return {}


def child(node: dict[str, Any] | None, key: str) -> dict[str, Any]:
    node = resolve(node)
    if key in (node.get("properties") or {}):
        return resolve(node["properties"][key])
    extra = node.get("additionalProperties")
    return resolve(extra) if isinstance(extra, dict) else {}


def items(node: dict[str, Any] | None) -> dict[str, Any]:
    node = resolve(node)
    return resolve(node.get("items")) if isinstance(node.get("items"), dict) else {}
