"""Conversions between wire messages and plain Python values, shared by PS and client."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence

from geofed.manifest import Manifest, TensorEntry, as_manifest

from . import geofed_pb2 as pb

REPORT_FIELDS = ("train_loss", "eval_loss", "tokens_per_s", "bytes_sent", "step", "idle_s")
# The round in hand, heartbeat by heartbeat (client_agent.progress): the PS waits only for sessions it moves.
PROGRESS_FIELDS = ("round_base_version", "round_steps", "round_tokens")
MAX_PARADIGM_METRICS = 8  # of a report's paradigm metrics, the most the PS keeps
_METRIC_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")

def report_to_proto(report: dict | None) -> pb.ClientReport:
    """A client's progress report (unknown keys are ignored)."""
    report = report or {}
    fields = (*REPORT_FIELDS, *PROGRESS_FIELDS)
    msg = pb.ClientReport(**{k: report[k] for k in fields if report.get(k) is not None})
    msg.paradigm_metrics.update({str(k): float(v) for k, v in (report.get("paradigm_metrics") or {}).items()})
    return msg


def report_from_proto(msg: pb.ClientReport) -> dict:
    """A report as sent; of its paradigm metrics, the first `MAX_PARADIGM_METRICS` with a plain name (letters,
    digits, underscores; at most 64) and a finite value, so a client cannot grow what the PS keeps of it."""
    report = {k: getattr(msg, k) for k in (*REPORT_FIELDS, *PROGRESS_FIELDS)}
    metrics = ((k, v) for k, v in sorted(msg.paradigm_metrics.items())
               if _METRIC_NAME.fullmatch(k) and math.isfinite(v))
    report["paradigm_metrics"] = dict(itertools.islice(metrics, MAX_PARADIGM_METRICS))
    return report


def manifest_to_proto(entries: Iterable[TensorEntry | tuple]) -> list[pb.TensorSpec]:
    return [pb.TensorSpec(name=t.name, shape=list(t.shape), dtype=t.dtype) for t in as_manifest(entries)]


def manifest_from_proto(specs: Sequence[pb.TensorSpec]) -> Manifest:
    return tuple(TensorEntry(s.name, tuple(int(d) for d in s.shape), s.dtype) for s in specs)
