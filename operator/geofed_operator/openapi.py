"""pydantic model -> structural OpenAPI v3 schema (for CRDs) or JSON Schema (for Helm values).

pydantic already turns each field into JSON Schema (ge/le -> minimum/maximum, Literal -> enum,
description, default); this module reshapes that into what the API server accepts as a *structural*
schema: no `$ref`, every node typed, `X | None` as plain optional `X`, OpenAPI 3.0 boolean
`exclusiveMinimum`, camelCase property names (`keys.camel`), `default: {}` on nested sections so
the API server fills in their defaults, and `x-kubernetes-*` extensions passed through.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel

from geofed_operator.keys import Shape, camel, field_keys

Flavour = Literal["openapi", "jsonschema"]

# Leaf keywords kept as they are; anything else pydantic emits (title, ...) is dropped.
_LEAF_KEYS = (
    "type", "enum", "format", "pattern", "minimum", "maximum", "minLength", "maxLength",
    "minItems", "maxItems", "default", "description",
)  # fmt: skip
# Mark an int-or-string leaf (resource quantities) with this json_schema_extra key.
INT_OR_STRING = "x-kubernetes-int-or-string"


def model_schema(model: type[BaseModel], flavour: Flavour = "openapi") -> dict[str, Any]:
    """The schema of `model` with camelCase keys, every `$ref` inlined."""
    root = model.model_json_schema(mode="validation")
    return _object(model, root, root.get("$defs", {}), flavour)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline `$ref` / `allOf: [$ref]`, keeping the referring node's own keys (description, ...)."""
    node = dict(node)
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node.pop("allOf")[0], **node}
    ref = node.pop("$ref", None)
    if ref is not None:
        target = defs[ref.rsplit("/", 1)[-1]]
        node = {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "title"}}
    return node


def _drop_null(node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`anyOf: [X, null]` -> (X merged with the outer keys, True)."""
    options = node.get("anyOf")
    if not options:
        return node, False
    non_null = [o for o in options if o.get("type") != "null"]
    nullable = len(non_null) < len(options)
    if len(non_null) != 1:
        return node, nullable  # a genuine union (int-or-string) stays as it is
    outer = {k: v for k, v in node.items() if k != "anyOf"}
    if outer.get("default", "unset") is None:
        del outer["default"]  # absent means None
    return {**non_null[0], **outer}, nullable


def _description(node: dict[str, Any], model: type[BaseModel] | None) -> str | None:
    if node.get("description"):
        return " ".join(str(node["description"]).split())
    if model is not None and model.__doc__:
        return " ".join(model.__doc__.strip().split("\n\n")[0].split())
    return None


def _extensions(node: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    if flavour != "openapi":
        return {}
    return {k: copy.deepcopy(v) for k, v in node.items() if k.startswith("x-kubernetes-") and k != INT_OR_STRING}


def _object(model: type[BaseModel], node: dict[str, Any], defs: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    node = _resolve(node, defs)
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, (key, shape) in field_keys(model).items():
        info = model.model_fields[name]
        sub = _node(node["properties"][name], shape, defs, flavour)
        if shape[0] in ("model", "union") and info.default_factory is not None:
            # let the API server apply the section's own defaults (or the field's, when it names one)
            sub["default"] = copy.deepcopy(node["properties"][name].get("default", {}))
        props[key] = sub
        if info.is_required():
            required.append(key)
    out: dict[str, Any] = {"type": "object"}
    desc = _description(node, model)
    if desc:
        out["description"] = desc
    out["properties"] = props
    if required:
        out["required"] = required
    if flavour == "jsonschema":
        out["additionalProperties"] = False
    out.update(_extensions(node, flavour))
    return out


def _union(node: dict[str, Any], shape: Shape, defs: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    """A discriminated union of sections (the paradigm settings).

    A structural CRD schema cannot branch, so the variants' properties are merged into one object whose
    discriminator enumerates the tags, and a CEL rule per variant-only field refuses it under another tag.
    The Helm values schema (plain JSON Schema) says the same exactly, with `oneOf`.
    """
    discriminator, variants = camel(shape[1]), shape[2]
    objects = {
        tag: _object(model, model.model_json_schema(mode="validation"), defs, flavour)
        for tag, model in variants.items()
    }
    for tag, obj in objects.items():
        obj["properties"][discriminator] = {**obj["properties"][discriminator], "enum": [tag]}
    desc = _description(node, None)
    if flavour == "jsonschema":
        out: dict[str, Any] = {"type": "object", "oneOf": list(objects.values())}
        if desc:
            out["description"] = desc
        return out
    props: dict[str, Any] = {}
    owners: dict[str, list[str]] = {}
    for tag, obj in objects.items():
        for key, sub in obj["properties"].items():
            props.setdefault(key, copy.deepcopy(sub))
            owners.setdefault(key, []).append(tag)
    first = next(iter(variants))
    props[discriminator] = {
        **props[discriminator],
        "enum": list(variants),
        "default": first,
        "description": f"Which variant: {', '.join(variants)}.",
    }
    rules = []
    for key, tags in owners.items():
        if key == discriminator or len(tags) == len(variants):
            continue
        allowed = " || ".join(f"self.{discriminator} == '{t}'" for t in tags)
        props[key]["description"] = f"({', '.join(tags)} only) " + props[key].get("description", "")
        props[key].pop("default", None)  # a default would be filled in under every tag; pydantic applies it
        rules.append(
            {
                "rule": f"!has(self.{key}) || {allowed}",
                "message": f"{key} applies only to {discriminator} {', '.join(tags)}",
            }
        )
    out = {"type": "object"}
    if desc:
        out["description"] = desc
    out["properties"] = props
    out.update(_extensions(node, flavour))
    if rules:
        out["x-kubernetes-validations"] = [*out.get("x-kubernetes-validations", []), *rules]
    return out


def _node(node: dict[str, Any], shape: Shape, defs: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    node, nullable = _drop_null(_resolve(node, defs))
    kind = shape[0]
    if kind == "union":
        return _union(node, shape, defs, flavour)
    if kind == "model":
        out = _object(shape[1], node, defs, flavour)
        if node.get("description"):
            out["description"] = _description(node, None)
        return _nullable(out, nullable, flavour)
    if kind == "list":
        out = {"type": "array", "items": _node(node["items"], shape[1], defs, flavour)}
    elif kind == "dict":
        out = {
            "type": "object",
            "additionalProperties": _node(node["additionalProperties"], shape[1], defs, flavour),
        }
    else:
        out = _leaf(node, flavour)
        return _nullable(out, nullable, flavour)
    for key in ("description", "default", "minItems", "maxItems"):
        if key in node:
            out[key] = _description(node, None) if key == "description" else copy.deepcopy(node[key])
    out.update(_extensions(node, flavour))
    return _nullable(out, nullable, flavour)


def _leaf(node: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    node = dict(node)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get(INT_OR_STRING):  # a quantity: the API server's own int-or-string form
        out: dict[str, Any] = (
            {INT_OR_STRING: True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
            if flavour == "openapi"
            else {"type": ["integer", "string"]}
        )
        out.update({k: node[k] for k in ("pattern", "default", "description") if k in node})
    else:
        out = {k: copy.deepcopy(node[k]) for k in _LEAF_KEYS if k in node}
        if out.get("default", "unset") is None:
            del out["default"]  # absent means None (`default: null` is no value of its type)
        if "type" not in out:
            raise TypeError(f"schema node without a single type cannot be structural: {node!r}")
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:
            if flavour == "openapi":  # OpenAPI 3.0: a boolean beside minimum/maximum
                out[plain] = node[bound]
                out[bound] = True
            else:
                out[bound] = node[bound]
    if "description" in out:
        out["description"] = _description(out, None)
    out.update(_extensions(node, flavour))
    return out


def _nullable(out: dict[str, Any], nullable: bool, flavour: Flavour) -> dict[str, Any]:
    """Helm values may spell an unset optional as `~`; a CRD simply omits it."""
    if nullable and flavour == "jsonschema" and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out
