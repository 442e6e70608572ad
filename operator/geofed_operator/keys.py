"""Field names in Kubernetes style: `sync_interval_s` in Python is `syncIntervalSeconds` in a manifest.

The pydantic models (`geofed.config` and ours) keep snake_case; everything that faces Kubernetes (CRD
schemas, custom objects, chart values) uses camelCase. The mapping is derived from the models' own
fields, so it is exact in both directions and never guesses from a string alone.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar, Union

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

# Kubernetes API conventions spell initialisms in capitals after the first word (`podCIDR`, `clusterIP`).
_INITIALISMS = {"ttl": "TTL", "tls": "TLS", "ca": "CA", "id": "ID", "url": "URL", "dns": "DNS", "ip": "IP"}


def camel(name: str) -> str:
    """`token_ttl_s` -> `tokenTTLSeconds`, `rate_limit_per_s` -> `rateLimitPerSecond`, `n_embd` -> `nEmbd`."""
    parts = name.split("_")
    if len(parts) > 1 and parts[-2:] == ["per", "s"]:
        parts = [*parts[:-2], "per", "second"]
    elif len(parts) > 1 and parts[-1] == "s":
        parts = [*parts[:-1], "seconds"]
    head, *tail = parts
    return head + "".join(_INITIALISMS.get(p, p.capitalize()) for p in tail)


# A field's shape, as far as key conversion cares: a nested model, a list or dict of something, or a leaf.
Shape = tuple[Any, ...]
_LEAF: Shape = ("leaf",)


def shape_of(annotation: Any, discriminator: str | None = None) -> Shape:
    """Reduce a field annotation to ("model", cls) / ("list", shape) / ("dict", shape) / ("leaf",), or
    ("union", discriminator, {tag: cls}) for a discriminated union of models (e.g. the paradigm settings)."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        shapes = [shape_of(a) for a in typing.get_args(annotation) if a is not type(None)]
        non_leaf = [s for s in shapes if s != _LEAF]
        if len(non_leaf) > 1:
            if discriminator and all(s[0] == "model" for s in non_leaf):
                return ("union", discriminator, {_tag(s[1], discriminator): s[1] for s in non_leaf})
            raise TypeError(f"unions of several structured types are not supported: {annotation!r}")
        return non_leaf[0] if non_leaf else _LEAF
    if origin is typing.Annotated:
        inner, *meta = typing.get_args(annotation)
        found = next((getattr(m, "discriminator", None) for m in meta if getattr(m, "discriminator", None)), None)
        return shape_of(inner, found or discriminator)
    if origin in (list, tuple, set, frozenset):
        return ("list", shape_of(typing.get_args(annotation)[0]))
    if origin in (dict, Mapping):
        return ("dict", shape_of(typing.get_args(annotation)[1]))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    return _LEAF


def _tag(model: type[BaseModel], discriminator: str) -> str:
    """The Literal value a union member's discriminator field is fixed to."""
    return str(model.model_fields[discriminator].default)


@functools.cache
def field_keys(model: type[BaseModel]) -> dict[str, tuple[str, Shape]]:
    """snake field name -> (camel key, shape) for one model class."""
    out: dict[str, tuple[str, Shape]] = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        out[name] = (str(extra.get("k8sName", camel(name))), shape_of(info.annotation, info.discriminator))
    return out


def _convert(shape: Shape, value: Any, to_k8s: bool) -> Any:
    kind = shape[0]
    if value is None or kind == "leaf":
        return value
    if kind == "list" and isinstance(value, list):
        return [_convert(shape[1], v, to_k8s) for v in value]
    if kind == "dict" and isinstance(value, Mapping):
        return {k: _convert(shape[1], v, to_k8s) for k, v in value.items()}
    if kind == "model" and isinstance(value, Mapping):
        return to_k8s_keys(shape[1], value) if to_k8s else from_k8s_keys(shape[1], value)
    if kind == "union" and isinstance(value, Mapping):
        model = shape[2].get(value.get(camel(shape[1]) if not to_k8s else shape[1]))
        if model is None:  # unknown tag: pydantic names it
            return value
        return to_k8s_keys(model, value) if to_k8s else from_k8s_keys(model, value)
    return value  # wrong type: left for pydantic to report


def to_k8s_keys(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """Rename a model dump's keys to camelCase, recursively."""
    keys = field_keys(model)
    out: dict[str, Any] = {}
    for name, value in data.items():
        key, shape = keys.get(name, (name, _LEAF))
        out[key] = _convert(shape, value, to_k8s=True)
    return out


def from_k8s_keys(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """Rename camelCase keys back to the model's field names; unknown keys pass through for pydantic."""
    back = {key: (name, shape) for name, (key, shape) in field_keys(model).items()}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name, shape = back.get(key, (key, _LEAF))
        out[name] = _convert(shape, value, to_k8s=False)
    return out


def k8s_dump(instance: BaseModel, *, exclude_none: bool = True, exclude_unset: bool = False) -> dict[str, Any]:
    """A model instance as a camelCase JSON-ready dict (what a manifest would hold)."""
    data = instance.model_dump(mode="json", exclude_none=exclude_none, exclude_unset=exclude_unset)
    return to_k8s_keys(type(instance), data)


def k8s_validate(model: type[M], data: Mapping[str, Any]) -> M:
    """Parse a camelCase manifest section into the model (pydantic errors name the snake fields)."""
    return model.model_validate(from_k8s_keys(model, data))
