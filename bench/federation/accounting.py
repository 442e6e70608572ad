"""Per-client accounting from the agent's metrics.jsonl: syncs, tokens, encoded bytes, where time went.

Each line is one sync (train, push, wait for the next model). Only syncs finished by the end of the
budget count. Idle fraction = idle_s / (train_s + push_s + idle_s): the share of a client's accounted
time spent waiting for a global model (a barrier, or a slow downlink), as the paper's "idle duration".
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from .results import ClientResult
from .scenario import ClientSpec


def read_metrics(path: Path) -> list[dict]:
    """The complete lines of a client's metrics.jsonl (a line cut off by the kill is dropped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # only the last line can be torn: the agent appends whole lines
    return out


def within(records: list[dict], end_wall: float) -> list[dict]:
    """Syncs whose record was written by `end_wall` (time.time())."""
    return [r for r in records if r["t"] <= end_wall]


def record_tokens(rec: dict) -> int:
    """Tokens behind one pushed delta (tokens/s × training seconds, as the agent computed them)."""
    return int(round(rec["tokens_per_s"] * rec["train_s"]))


def landed_in(rec: dict) -> int:
    """The first global version that contains this sync's delta.

    APPLIED: the version its push created. ACCEPTED (buffered, e.g. waiting for a sync round): the
    next one. DUPLICATE (a retried upload the PS already had): at the latest the version it reports.
    """
    return rec["version"] + 1 if rec["status"] == "ACCEPTED" else rec["version"]


TAKEN = ("ACCEPTED", "APPLIED", "DUPLICATE")


def taken_tokens(records: list[dict]) -> list[tuple[dict, int]]:
    """(record, tokens) of every delta the PS took; a STALE push, or one still DEFERRED by its site's round
    share when the client gave up on it, carries none."""
    return [(r, record_tokens(r)) for r in records if r["status"] in TAKEN]


def delta_tokens(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(first version containing it, tokens) of every delta the PS took (`taken_tokens`)."""
    taken = taken_tokens(records)
    versions = np.array([landed_in(r) for r, _ in taken], dtype=np.int64)
    tokens = np.array([t for _, t in taken], dtype=np.int64)
    return versions, tokens


def client_result(
    name: str, spec: ClientSpec, records: list[dict], *, bytes_up: int, bytes_down: int, exit_code: int | None
) -> ClientResult:
    """Fold one client's (budget-trimmed) sync records and its link counters into a ClientResult."""
    return ClientResult(
        client=name,
        slowdown=spec.slowdown,
        micro_batch=spec.micro_batch,
        link=spec.link,
        bytes_up=bytes_up,
        bytes_down=bytes_down,
        syncs=len(records),
        statuses=dict(Counter(r["status"] for r in records)),
        payload_bytes=int(sum(r["payload_bytes"] for r in records)),
        tokens=int(sum(t for _, t in taken_tokens(records))),
        train_s=float(sum(r["train_s"] for r in records)),
        push_s=float(sum(r["push_s"] for r in records)),
        idle_s=float(sum(r["idle_s"] for r in records)),
        codecs=sorted({r["codec"] for r in records}),
        exit_code=exit_code,
    )


def idle_fraction(c: ClientResult) -> float | None:
    """Share of the client's accounted time spent waiting for a model; None before its first sync."""
    return c.idle_s / c.accounted_s if c.accounted_s > 0 else None

