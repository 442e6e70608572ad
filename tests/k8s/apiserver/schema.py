"""Decoding, pruning, defaulting and schema validation of writes, as the API server does them.

Custom resources: the CRD version's structural schema. Unknown fields are pruned (kept under
`x-kubernetes-preserve-unknown-fields`), with a warning, or refused with `fieldValidation=Strict`;
`default`s are applied (also in place of a null in a non-nullable field); then type, `required`,
`enum`, `pattern`, `format`, length, item and property counts, list-type uniqueness and the CEL
rules (cel.py) are checked and reported as a 422 with the API server's messages.

Built-in kinds: the type's OpenAPI schema from kubernetes-validate (1.32), for pruning and unknown
fields (as above), JSON types (a 400 decoding error, as the real server reports a type mismatch),
`required` and `enum`. Defaults of built-in types and their hand-written validation (immutable fields,
port ranges, container name uniqueness, ...) are not applied.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import ipaddress
import re
import uuid
from typing import Any

from . import cel, errors, k8s_schemas
from .builtin_schema import BuiltinWalker
from .errors import FieldError
from .jsontypes import is_type, json_type
from .registry import ResourceType


def _format_ok(fmt: str, value: str) -> bool:
    try:
        if fmt in ("date-time", "datetime"):
            dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return "T" in value or " " in value
        if fmt == "date":
            dt.date.fromisoformat(value)
        elif fmt == "byte":
            base64.b64decode(value, validate=True)
        elif fmt == "ipv4":
            ipaddress.IPv4Address(value)
        elif fmt == "ipv6":
            ipaddress.IPv6Address(value)
        elif fmt == "cidr":
            ipaddress.ip_network(value, strict=False)
        elif fmt == "uuid":
            uuid.UUID(value)
        elif fmt == "hostname":
            return (
                re.fullmatch(r"[a-zA-Z0-9]([-a-zA-Z0-9]{0,62})?(\.[a-zA-Z0-9]([-a-zA-Z0-9]{0,62})?)*\.?", value)
                is not None
            )
        elif fmt == "duration":
            return re.fullmatch(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h|d|w))+", value) is not None
        elif fmt == "email":
            return re.fullmatch(r"[^@\s]+@[^@\s]+", value) is not None
    except ValueError:
        return False
    return True


class Walker:
    """One pass over a custom resource: prune, default, validate; collects errors and unknown-field paths."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.unknown: list[str] = []

    def walk(self, node: dict[str, Any], value: Any, path: str) -> Any:
        """The value pruned and defaulted (errors recorded)."""
        if value is None:
            if node.get("nullable"):
                return None
            kind = node.get("type")
            if kind:
                self.errors.append(
                    FieldError(path, "Invalid", f'{path} in body must be of type {kind}: "null"', "null")
                )
            return None
        if node.get("x-kubernetes-int-or-string"):
            if not (is_type(value, "integer") or isinstance(value, str)):
                detail = f'{path} in body must be of type integer,string: "{json_type(value)}"'
                self.errors.append(FieldError(path, "Invalid", detail, json_type(value)))
                return value
        elif node.get("type") and not is_type(value, node["type"]):
            detail = f'{path} in body must be of type {node["type"]}: "{json_type(value)}"'
            self.errors.append(FieldError(path, "Invalid", detail, json_type(value)))
            return value
        if isinstance(value, dict):
            value = self._object(node, value, path)
        elif isinstance(value, list):
            value = self._array(node, value, path)
        self._scalar_checks(node, value, path)
        return value

    def _object(self, node: dict[str, Any], value: dict[str, Any], path: str) -> dict[str, Any]:
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        preserve = node.get("x-kubernetes-preserve-unknown-fields")
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in props:
                out[key] = item
            elif isinstance(extra, dict):
                out[key] = self.walk(extra, item, f"{path}[{key}]")
            elif extra is True or preserve or (not props and node.get("type") is None):
                out[key] = item
            else:
                self.unknown.append(sub)
        for key, sub_node in props.items():
            sub = f"{path}.{key}" if path else key
            default = sub_node.get("default")  # `default: null` is no default, as on a real server
            if (key not in out or (out[key] is None and not sub_node.get("nullable"))) and default is not None:
                out[key] = copy.deepcopy(default)
            if key in out:
                if out[key] is None and not sub_node.get("nullable"):
                    del out[key]  # a null in a non-nullable field is pruned, as the API server does
                    continue
                out[key] = self.walk(sub_node, out[key], sub)
        for key in node.get("required") or []:
            if key not in out:
                self.errors.append(FieldError(f"{path}.{key}" if path else key, "Required"))
        if "maxProperties" in node and len(out) > node["maxProperties"]:
            self.errors.append(
                FieldError(path, "TooMany", f"must have at most {node['maxProperties']} items", len(out))
            )
        if "minProperties" in node and len(out) < node["minProperties"]:
            detail = f"{path} in body should have at least {node['minProperties']} properties"
            self.errors.append(FieldError(path, "Invalid", detail, len(out)))
        return out

    def _array(self, node: dict[str, Any], value: list[Any], path: str) -> list[Any]:
        items = node.get("items")
        out = [self.walk(items, v, f"{path}[{i}]") if isinstance(items, dict) else v for i, v in enumerate(value)]
        if "maxItems" in node and len(out) > node["maxItems"]:
            self.errors.append(FieldError(path, "TooMany", f"must have at most {node['maxItems']} items", len(out)))
        if "minItems" in node and len(out) < node["minItems"]:
            detail = f"{path} in body should have at least {node['minItems']} items"
            self.errors.append(FieldError(path, "Invalid", detail, len(out)))
        list_type = node.get("x-kubernetes-list-type")
        if list_type == "set" or node.get("uniqueItems"):
            seen: list[Any] = []
            for i, item in enumerate(out):
                if item in seen:
                    self.errors.append(FieldError(f"{path}[{i}]", "Duplicate", "", item))
                seen.append(item)
        elif list_type == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            seen_keys: list[tuple[Any, ...]] = []
            for i, item in enumerate(out):
                if not isinstance(item, dict):
                    continue
                key = tuple(item.get(k) for k in keys)
                if key in seen_keys:
                    shown = (
                        "map[string]interface {}{"
                        + ", ".join(f'"{k}":{errors.go_value(item.get(k))}' for k in keys)
                        + "}"
                    )
                    self.errors.append(FieldError(f"{path}[{i}]", "Duplicate", shown))
                seen_keys.append(key)
        return out

    def _scalar_checks(self, node: dict[str, Any], value: Any, path: str) -> None:
        if "enum" in node and value not in node["enum"]:
            supported = ", ".join(errors.go_value(v) for v in node["enum"])
            self.errors.append(FieldError(path, "NotSupported", f"supported values: {supported}", value))
        if isinstance(value, str):
            if "maxLength" in node and len(value) > node["maxLength"]:
                unit = "byte" if node["maxLength"] == 1 else "bytes"
                self.errors.append(FieldError(path, "TooLong", f"may not be more than {node['maxLength']} {unit}"))
            if "minLength" in node and len(value) < node["minLength"]:
                detail = f"{path} in body should be at least {node['minLength']} chars long"
                self.errors.append(FieldError(path, "Invalid", detail, value))
            if "pattern" in node and re.search(node["pattern"], value) is None:
                self.errors.append(
                    FieldError(path, "Invalid", f"{path} in body should match '{node['pattern']}'", value)
                )
            fmt = node.get("format")
            if fmt and not _format_ok(fmt, value):
                self.errors.append(
                    FieldError(path, "Invalid", f'{path} in body must be of type {fmt}: "{value}"', value)
                )
        elif is_type(value, "number"):
            if "minimum" in node:
                exclusive = node.get("exclusiveMinimum") is True
                if value < node["minimum"] or (exclusive and value == node["minimum"]):
                    relation = "greater than" if exclusive else "greater than or equal to"
                    detail = f"{path} in body should be {relation} {errors.go_value(node['minimum'])}"
                    self.errors.append(FieldError(path, "Invalid", detail, value))
            if "maximum" in node:
                exclusive = node.get("exclusiveMaximum") is True
                if value > node["maximum"] or (exclusive and value == node["maximum"]):
                    relation = "less than" if exclusive else "less than or equal to"
                    detail = f"{path} in body should be {relation} {errors.go_value(node['maximum'])}"
                    self.errors.append(FieldError(path, "Invalid", detail, value))
            if node.get("multipleOf") and value % node["multipleOf"] != 0:
                detail = f"{path} in body should be a multiple of {errors.go_value(node['multipleOf'])}"
                self.errors.append(FieldError(path, "Invalid", detail, value))


ROOT_KEYS = {"apiVersion", "kind", "metadata"}


_STEP = re.compile(r"\.?([^.\[]+)|\[([^\]]*)\]")
_MISSING = object()


def _at(obj: Any, path: str) -> Any:
    """The value at a field path (`spec.groups[0].name`, `<nil>` for the root), or a marker if absent."""
    if path == "<nil>":
        return obj
    for key, index in _STEP.findall(path):
        if isinstance(obj, dict):
            obj = obj.get(key or index, _MISSING)
        elif isinstance(obj, list) and index.isdigit() and int(index) < len(obj):
            obj = obj[int(index)]
        else:
            return _MISSING
    return obj


def _ratchet(found: list[FieldError], obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """CRD validation ratcheting (on by default since 1.30): an update may keep an invalid value it did not change."""
    if old is None:
        return found
    kept = []
    for error in found:
        path = error.path if error.kind != "Required" else error.path.rpartition(".")[0] or "<nil>"
        if _at(obj, path) is _MISSING or _at(obj, path) != _at(old, path):
            kept.append(error)
    return kept


def _unknown_fields(rtype: ResourceType, unknown: list[str], validation: str) -> list[str]:
    if not unknown:
        return []
    if validation == "Strict":
        listed = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise errors.bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
            f"strict decoding error: {listed}"
        )
    return [] if validation == "Ignore" else [f'unknown field "{u}"' for u in unknown]


def _metadata(obj: dict[str, Any], unknown: list[str]) -> None:
    object_meta = k8s_schemas.definitions()["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
    walker = BuiltinWalker()
    obj["metadata"] = walker.walk(object_meta, obj.get("metadata") or {}, "metadata")
    unknown += walker.unknown


def prune_and_default(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """What reading from storage does to a custom resource: unknown fields pruned, defaults applied."""
    if rtype.custom and rtype.schema is not None:
        root = dict(rtype.schema)
        root["properties"] = {k: v for k, v in (root.get("properties") or {}).items() if k not in ROOT_KEYS}
        body = Walker().walk(root, {k: v for k, v in obj.items() if k not in ROOT_KEYS}, "")
        for key in [k for k in obj if k not in ROOT_KEYS]:
            del obj[key]
        obj.update(body)


def prune_default_validate(
    rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None, validation: str
) -> list[str]:
    """Prune, default and validate `obj` in place; the warnings to send; raises the API server's error."""
    unknown: list[str] = []
    _metadata(obj, unknown)
    name = obj["metadata"].get("name", "")
    if rtype.custom:
        assert rtype.schema is not None
        walker = Walker()
        body = {k: v for k, v in obj.items() if k not in ROOT_KEYS}
        root = dict(rtype.schema)
        root["properties"] = {k: v for k, v in (root.get("properties") or {}).items() if k not in ROOT_KEYS}
        root["required"] = [r for r in root.get("required") or [] if r not in ROOT_KEYS]
        pruned = walker.walk(root, body, "")
        unknown += walker.unknown
        for key in list(obj):
            if key not in ROOT_KEYS:
                del obj[key]
        obj.update(pruned)
        warnings = _unknown_fields(rtype, unknown, validation)
        found = _ratchet(walker.errors, obj, old)
        if not found:
            found = _ratchet(cel.validate(rtype.schema, obj, old), obj, old)
        if found:
            raise errors.invalid(rtype.kind, rtype.group, name, found)
        return warnings
    schema = k8s_schemas.schema_for(rtype.group, rtype.version, rtype.kind)
    if schema is None:
        return _unknown_fields(rtype, unknown, validation)
    builtin = BuiltinWalker(k8s_schemas.definition_name(rtype.group, rtype.version, rtype.kind) or "")
    body = {k: v for k, v in obj.items() if k not in ROOT_KEYS}
    node = dict(k8s_schemas.resolve(schema))
    node["properties"] = {k: v for k, v in (node.get("properties") or {}).items() if k not in ROOT_KEYS}
    pruned = builtin.walk(node, body, "")
    if builtin.type_errors:
        raise errors.bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {builtin.type_errors[0]}'
        )
    for key in list(obj):
        if key not in ROOT_KEYS:
            del obj[key]
    obj.update(pruned)
    warnings = _unknown_fields(rtype, unknown + builtin.unknown, validation)
    if builtin.errors:
        raise errors.invalid(rtype.kind, rtype.group, name, builtin.errors)
    return warnings
