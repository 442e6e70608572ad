"""Status of a sharded PS: the front's per-shard view -> `status.shards` and a ShardDown condition.

Pure functions, like `federation_status`; `handlers/federation.py` feeds them the front's admin status.
The front reports one entry per shard (`Admin.GetStatus` `shards`: index, address, up, version, numel,
instance, last_error); the admin client may hand them over as dicts or as protobuf messages, so both
are read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from geofed_operator.federation_status import (
    federation_status_degraded,
    federation_status_from_ps,
    federation_status_not_ready,
)
from geofed_operator.status_models import FederationStatus, status_patch


def _field(entry: Any, name: str, default: Any) -> Any:
    if isinstance(entry, Mapping):
        return entry.get(name, default)
    return getattr(entry, name, default)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shard_entries(reported: Sequence[Any] | None) -> list[dict[str, Any]]:
    """`status.shards` (snake_case; status_patch camelCases it) from the front's list, in index order."""
    entries = [
        {
            "index": int(_field(s, "index", 0)),
            "address": _clip(str(_field(s, "address", "")), 261),
            "up": bool(_field(s, "up", False)),
            "version": int(_field(s, "version", 0)),
            "instance": _clip(str(_field(s, "instance", "")), 253),
            "last_error": _clip(str(_field(s, "last_error", "")), 4096),
        }
        for s in reported or []
    ]
    return sorted(entries, key=lambda e: e["index"])


def down_shards(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Shards the front failed to reach on its last call to them.

    Not up *and* an error: a shard the front has not called yet (a fresh front before the master's
    upload) is neither up nor failing, and is not reported as down.
    """
    return [e for e in entries if not e["up"] and e["last_error"]]


def federation_status_from_shards(
    ps: Mapping[str, Any],
    shard_count: int,
    rolling: Sequence[str] = (),
    *,
    clients: Sequence[Mapping[str, Any]] | None = None,
    now: dt.datetime,
    generation: int | None,
    conditions: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """Status patch for a sharded PS from its front's admin status (keys of `AdminClient.status()`).

    The front's own fields are the federation's (version, clients, losses); `shards` holds each shard.
    Degraded names every shard that is down (`ShardDown`: pushes wait until it is back) or that the
    front does not report (`ShardStatusMissing`: nothing says it is healthy). Otherwise `rolling` (why
    each shard Deployment that is not rolled out and ready is not) keeps it Progressing, not Ready.
    """
    entries = shard_entries(ps.get("shards"))
    patch = federation_status_from_ps(ps, clients=clients, now=now, generation=generation, conditions=conditions)
    up = sum(1 for e in entries if e["up"])
    extra = status_patch(FederationStatus, shards=entries, shards_up=f"{up}/{shard_count}")
    missing = sorted(set(range(shard_count)) - {e["index"] for e in entries})
    down = down_shards(entries)
    problem: tuple[str, str] | None = None
    if down:
        what = "; ".join(f"shard {e['index']} ({e['address'] or '?'}): {_clip(e['last_error'], 300)}" for e in down)
        problem = (
            "ShardDown",
            f"PS shard(s) {', '.join(str(e['index']) for e in down)} down: {what}; pushes wait until every "
            "shard is back (a restarted shard restores its slice at the committed version)",
        )
    elif missing:
        problem = (
            "ShardStatusMissing",
            f"the PS front reports no status for shard(s) {', '.join(map(str, missing))} of {shard_count} "
            "(a PS image without per-shard status?); their health is unknown",
        )
    if problem is not None:
        degraded = federation_status_degraded(*problem, now=now, generation=generation, conditions=patch["conditions"])
        patch.update(phase=degraded["phase"], conditions=degraded["conditions"])
    elif rolling:
        waiting = federation_status_not_ready("; ".join(rolling), now=now, generation=generation,
                                              conditions=patch["conditions"])  # fmt: skip
        patch.update(phase=waiting["phase"], conditions=waiting["conditions"])
    return {**patch, **extra}
