"""Server-side table printing (what `kubectl get` asks for with `Accept: ...;as=Table`), from a CRD's columns.

The API server renders a custom resource's `additionalPrinterColumns` itself: each column's JSONPath is
evaluated on the object and `date` columns become ages such as `40s`. This does the same for the
JSONPath forms our CRDs use: `.a.b` and `.a[?(@.k=="v")].b`.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_FILTER = re.compile(r'^(?P<list>[^\[]+)\[\?\(@\.(?P<key>\w+)=="(?P<value>[^"]*)"\)\](?P<rest>.*)$')


def _walk(obj: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def evaluate(obj: dict[str, Any], path: str) -> Any:
    """The value at a printer column's JSONPath, or None."""
    match = _FILTER.match(path)
    if match is None:
        return _walk(obj, path)
    items = _walk(obj, match["list"]) or []
    hit = next((i for i in items if isinstance(i, dict) and str(i.get(match["key"])) == match["value"]), None)
    return _walk(hit, match["rest"]) if hit is not None else None


def age(stamp: str, now: dt.datetime) -> str:
    """`translateTimestampSince`: 40s, 5m, 3h, 2d."""
    seconds = int((now - dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _cell(value: Any, kind: str, now: dt.datetime) -> Any:
    if value is None:
        return None
    if kind == "date":
        return age(str(value), now)
    return value


def table(objects: list[dict[str, Any]], columns: list[dict[str, Any]]) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of `objects` with the CRD's printer columns (Name first, as the API server does)."""
    now = dt.datetime.now(dt.UTC)
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}]
    definitions += [
        {"name": c["name"], "type": c["type"], "format": "", "description": "", "priority": c.get("priority", 0)}
        for c in columns
    ]
    rows = [
        {
            "cells": [o["metadata"]["name"], *(_cell(evaluate(o, c["jsonPath"]), c["type"], now) for c in columns)],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
        }
        for o in objects
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": definitions,
        "rows": rows,
    }
