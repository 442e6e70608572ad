"""JSON value types as OpenAPI schemas name them, and the Go types a decoding error names."""

from __future__ import annotations

from typing import Any

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}
GO_TYPES = {
    "string": "string",
    "integer": "int",
    "number": "float64",
    "boolean": "bool",
    "object": "map",
    "array": "slice",
}


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "null")


def is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "null":
        return value is None
    return isinstance(value, TYPES.get(kind, object))
