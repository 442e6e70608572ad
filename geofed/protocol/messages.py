"""Conversions between wire messages and plain Python values, shared by PS and client."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import geofed_pb2 as pb

REPORT_FIELDS = ("train_loss", "eval_loss", "tokens_per_s", "bytes_sent", "step", "idle_s")

ManifestEntry = tuple[str, tuple[int, ...], str]


def report_to_proto(report: dict | None) -> pb.ClientReport:
    """A client's progress report (unknown keys are ignored)."""
    report = report or {}
    return pb.ClientReport(**{k: report[k] for k in REPORT_FIELDS if report.get(k) is not None})


def report_from_proto(msg: pb.ClientReport) -> dict:
    return {k: getattr(msg, k) for k in REPORT_FIELDS}


def manifest_to_proto(entries: Iterable[ManifestEntry]) -> list[pb.TensorSpec]:
    return [pb.TensorSpec(name=n, shape=list(s), dtype=d) for n, s, d in entries]


def manifest_from_proto(specs: Sequence[pb.TensorSpec]) -> list[ManifestEntry]:
    return [(s.name, tuple(int(d) for d in s.shape), s.dtype) for s in specs]
