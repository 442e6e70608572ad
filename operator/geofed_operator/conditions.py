"""Kubernetes-style conditions: set one, keep its lastTransitionTime while its status does not change."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

_ORDER = {"Ready": 0, "Progressing": 1, "Degraded": 2}


def rfc3339(when: dt.datetime) -> str:
    """`2025-01-02T03:04:05Z` (what metav1.Time serialises to)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> dt.datetime | None:
    """The inverse of `rfc3339` (None stays None)."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def get_condition(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    """The condition of type `kind`, if present."""
    return next((c for c in conditions or () if c.get("type") == kind), None)


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    kind: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    now: dt.datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """A new list with condition `kind` set (True/False/Unknown for None); the others are kept."""
    text = "Unknown" if status is None else str(bool(status))
    old = get_condition(conditions, kind)
    since = old.get("lastTransitionTime") if old and old.get("status") == text else None
    new: dict[str, Any] = {
        "type": kind,
        "status": text,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": since or rfc3339(now),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    out = [dict(c) for c in conditions or () if c.get("type") != kind]
    out.append(new)
    return sorted(out, key=lambda c: _ORDER.get(c["type"], len(_ORDER)))


def set_conditions(
    conditions: Sequence[Mapping[str, Any]] | None,
    updates: Mapping[str, tuple[bool | None, str, str]],
    *,
    now: dt.datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Apply several `kind -> (status, reason, message)` updates at once."""
    out = [dict(c) for c in conditions or ()]
    for kind, (status, reason, message) in updates.items():
        out = set_condition(out, kind, status, reason, message, now=now, generation=generation)
    return out
