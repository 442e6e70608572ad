"""Label and field selectors as the API server parses them (`a=b,c!=d,e in (x,y),!f`)."""

from __future__ import annotations

import re
from typing import Any

from .errors import bad_request

_SET = re.compile(r"^\s*(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")


def _terms(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def labels_match(labels: dict[str, str], selector: str) -> bool:
    for term in _terms(selector):
        match = _SET.match(term)
        if match:
            values = {v.strip() for v in match["values"].split(",")}
            present = labels.get(match["key"]) in values
            if present != (match["op"] == "in"):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


FIELDS = {"metadata.name", "metadata.namespace"}
EXTRA_FIELDS = {"pods": {"spec.nodeName", "status.phase"}, "secrets": {"type"}, "events": {"involvedObject.name",
                "involvedObject.kind", "involvedObject.namespace", "involvedObject.uid", "reason", "type"}}  # fmt: skip


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def fields_match(obj: dict[str, Any], selector: str, plural: str, custom: bool) -> bool:
    """Field selectors the server supports for this resource; others are a 400, as on a real server."""
    for term in _terms(selector):
        negate = "!=" in term
        key, value = term.split("!=" if negate else ("==" if "==" in term else "="), 1)
        key, value = key.strip(), value.strip()
        if key not in FIELDS | EXTRA_FIELDS.get(plural, set()):
            if custom:
                raise bad_request(f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace"')
            raise bad_request(f"field label not supported: {key}")
        if (_field(obj, key) == value) == negate:
            return False
    return True
