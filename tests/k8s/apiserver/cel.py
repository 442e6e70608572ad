"""CEL `x-kubernetes-validations` as the API server runs them (with cel-python), on create and update.

Each rule runs on the node it is attached to, after defaulting; a transition rule (one that uses
`oldSelf`) runs only on update and only where the old object has a value at that place (object
properties, and items of `x-kubernetes-list-type: map` lists matched by their keys), unless the rule
sets `optionalOldSelf`. A failure reports the rule's `message`, its `messageExpression`, or
`failed rule: <rule>`, at the node's path plus the rule's `fieldPath`, with the rule's `reason`.
Rules on the root see only `metadata.name` and `metadata.generateName`, as on a real server. The
real server also enforces a cost budget on each rule; this one does not.
"""

from __future__ import annotations

import functools
from typing import Any

import celpy

from .errors import FieldError

ENV = celpy.Environment()
REASONS = {"FieldValueInvalid": "Invalid", "FieldValueForbidden": "Forbidden", "FieldValueRequired": "Required",
           "FieldValueDuplicate": "Duplicate"}  # fmt: skip


@functools.cache
def program(expression: str) -> Any:
    return ENV.program(ENV.compile(expression))


def _run(expression: str, activation: dict[str, Any]) -> Any:
    try:
        return program(expression).evaluate(activation)
    except celpy.CELEvalError as exc:
        return exc


def _failure(rule: dict[str, Any], node: dict[str, Any], path: str, activation: dict[str, Any]) -> FieldError:
    message = rule.get("message")
    if rule.get("messageExpression"):
        evaluated = _run(rule["messageExpression"], activation)
        if isinstance(evaluated, str) and evaluated.strip():
            message = str(evaluated)
    message = message or f"failed rule: {rule['rule']}"
    where = path + (rule.get("fieldPath") or "")
    where = where.lstrip(".") or "<nil>"
    kind = REASONS.get(rule.get("reason") or "FieldValueInvalid", "Invalid")
    if kind == "Invalid":
        return FieldError(where, kind, message, node.get("type") or "object")
    return FieldError(where, kind, message)


def _check(node: dict[str, Any], value: Any, old: Any, path: str, found: list[FieldError]) -> None:
    if value is None:
        return
    for rule in node.get("x-kubernetes-validations") or []:
        transition = "oldSelf" in rule["rule"]
        if transition and old is None and not rule.get("optionalOldSelf"):
            continue
        activation: dict[str, Any] = {"self": celpy.json_to_cel(value)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old) if old is not None else None
        result = _run(rule["rule"], activation)
        if isinstance(result, celpy.CELEvalError) or not bool(result):
            found.append(_failure(rule, node, path, activation))
    if isinstance(value, dict):
        props = node.get("properties") or {}
        extra = node.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if sub is not None:
                before = old.get(key) if isinstance(old, dict) else None
                _check(sub, item, before, f"{path}.{key}" if key in props else f"{path}[{key}]", found)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        keys = node.get("x-kubernetes-list-map-keys") if node.get("x-kubernetes-list-type") == "map" else None
        for i, item in enumerate(value):
            before = None
            if keys and isinstance(old, list) and isinstance(item, dict):
                before = next(
                    (o for o in old if isinstance(o, dict) and all(o.get(k) == item.get(k) for k in keys)), None
                )
            _check(node["items"], item, before, f"{path}[{i}]", found)


def _root(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    md = obj.get("metadata") or {}
    visible = {k: md[k] for k in ("name", "generateName") if k in md}
    return {**{k: v for k, v in obj.items() if k != "metadata"}, "metadata": visible}


def validate(schema: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """The CEL rules' failures for `obj` (an update of `old`, or a create when `old` is None)."""
    found: list[FieldError] = []
    _check(schema, _root(obj), _root(old), "", found)
    return found
