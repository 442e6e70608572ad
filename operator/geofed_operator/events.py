"""Kubernetes Events about our objects: launches, relaunches, preemptions, rollouts, refusals.

`build_event` is pure; `post_event` creates it and never fails the reconcile (an Event is a courtesy
to whoever runs `kubectl describe`, not state the operator relies on).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Mapping
from typing import Any, Literal

from geofed_operator.conditions import rfc3339

log = logging.getLogger(__name__)
COMPONENT = "geofed-operator"
EventType = Literal["Normal", "Warning"]


def build_event(
    obj: Mapping[str, Any], type_: EventType, reason: str, message: str, *, now: dt.datetime
) -> dict[str, Any]:
    """A core/v1 Event about `obj` (any object with apiVersion, kind and metadata)."""
    meta = obj["metadata"]
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def post_event(
    kube: Any, obj: Mapping[str, Any], type_: EventType, reason: str, message: str, now: dt.datetime
) -> None:
    """Create the Event; a refusal is logged, never raised."""
    try:
        kube.create(build_event(obj, type_, reason, message, now=now))
    except Exception as exc:  # noqa: BLE001 - events are best effort by design
        log.debug("event %s on %s not posted: %s", reason, obj["metadata"].get("name"), exc)
