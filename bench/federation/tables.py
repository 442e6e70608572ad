"""Markdown tables from saved runs; pure (results in, text out).

Ratios are the headline, not seconds: the two CPU cores are shared with other work, so absolute times
drift from run to run while methods measured back to back in one session compare fairly. The time
column's ratio is against synchronous FedAvg, the baseline every goal of issue 6 is stated against.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from geofed.config import CodecConfig
from geofed_apps.wan.profile import LinkProfile, format_rate

from .accounting import idle_fraction
from .analysis import (
    best_loss,
    loss_at,
    loss_at_tokens,
    speedup,
    tail_mean,
    time_to_target,
    token_window_mean,
)
from .methods import MAIN_METHODS, METHODS
from .results import CurvePoint, RunResult

REFERENCE = "fedavg"
MB = 1e6
TAIL = 0.25  # the rate-distortion loss: time-average of the global loss over the last quarter of the budget
TOKEN_WINDOW = (
    0.8  # equal-tokens loss: mean over versions with tokens in [0.8, 1] × the smallest run's tokens
)


def name_of(method: str) -> str:
    return METHODS[method].label if method in METHODS else method


def order(runs: Sequence[RunResult]) -> list[RunResult]:
    """Main methods in the fixed order, then anything else by name; repeats after their first run."""
    rank = {m: i for i, m in enumerate(MAIN_METHODS)}
    return sorted(runs, key=lambda r: (rank.get(r.method, len(rank)), r.method, r.repeat))


def label(run: RunResult) -> str:
    name = name_of(run.method)
    return name if run.repeat == 1 else f"{name} (run {run.repeat})"


def fmt(x: float | None, spec: str = ".3f", missing: str = "—") -> str:
    return missing if x is None or x != x else format(x, spec)


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def median_time(runs: Sequence[RunResult], method: str, target: float, *, stay: bool = False) -> float | None:
    """Median time to target over the runs of `method` (None if there are none or any missed it)."""
    times = [time_to_target(r.curve, target, stay=stay) for r in runs if r.method == method]
    if not times or any(t is None for t in times):
        return None
    return statistics.median(times)


def single_run(runs: Sequence[RunResult]) -> RunResult | None:
    """Reference (a), one process at one client's batch: the `single` run, else the first single-kind one."""
    return next((r for r in runs if r.method == "single"), None) or next(
        (r for r in runs if r.kind == "single" and "@lr=" not in r.method), None
    )


def vs_single(run: RunResult, single: RunResult | None) -> float | None:
    """Final loss over the single-process loss at the same tokens, minus 1 (+0.05 = 5% worse)."""
    if single is None or run.kind == "single" or not run.curve:
        return None
    ref = loss_at_tokens(single.curve, run.tokens)
    return None if ref is None else run.curve[-1].loss / ref - 1.0


def _speedup_text(t: float | None, t_ref: float | None, budget_s: float) -> str:
    """How many times sooner than the reference; a bound when this run never reached the target."""
    if t is None:
        return "—" if t_ref is None else f"< {t_ref / budget_s:.2f}×"
    ratio = speedup(t_ref, t)
    return "—" if ratio is None else f"{ratio:.2f}×"


def loss_table(runs: Sequence[RunResult], checkpoints: Sequence[float], target: float | None) -> str:
    """One row per run: loss at each wall-clock checkpoint, time to target and speed-up over sync FedAvg.

    Two times to target: when a model first got there, and from when every later model stayed there.
    """
    single = single_run(runs)
    head = [
        "method",
        *(f"loss @ {c:g} s" for c in checkpoints),
        "best",
        "first ≤ target",
        "stays ≤ target from",
        "× sooner than sync FedAvg (first / stays)",
        "versions",
        "tokens (M)",
        "vs single @ equal tokens",
    ]
    rows = []
    for r in order(runs):
        if r.kind == "single":
            tail = [fmt(best_loss(r.curve)), "—", "—", "—", "—", fmt(r.tokens / MB, ".2f"), "(reference)"]
            rows.append([label(r), *(["—"] * len(checkpoints)), *tail])
            continue
        times, ratios = [], []
        for stay in (False, True):
            t = time_to_target(r.curve, target, stay=stay) if target is not None else None
            t_ref = median_time(runs, REFERENCE, target, stay=stay) if target is not None else None
            times.append("—" if target is None else (f"{t:.1f} s" if t is not None else "never"))
            ratios.append(_speedup_text(t, t_ref, r.budget_s))
        rows.append(
            [
                label(r),
                *(fmt(loss_at(r.curve, c)) for c in checkpoints),
                fmt(best_loss(r.curve)),
                *times,
                " / ".join(ratios),
                str(r.curve[-1].version if r.curve else 0),
                fmt(r.tokens / MB, ".2f"),
                pct(vs_single(r, single)),
            ]
        )
    return markdown(head, rows)


def client_header(i: int, run: RunResult) -> str:
    c = run.clients[i]
    link = LinkProfile.parse(c.link)
    return (
        f"{c.client}: {c.slowdown:g}× compute, µbatch {c.micro_batch}, "
        f"{format_rate(link.up_bytes_per_s)}↑ RTT {2 * link.latency_ms:g} ms"
    )


def wire_table(runs: Sequence[RunResult]) -> str:
    """Per method, per client: MB up/down on its link (proxy counters), syncs, idle fraction."""
    fed = [r for r in order(runs) if r.kind == "federated" and r.clients]
    if not fed:
        return "_no federated runs_"
    n = max(len(r.clients) for r in fed)
    widest = next(r for r in fed if len(r.clients) == n)
    head = ["method", *(client_header(i, widest) for i in range(n)), "total MB ↑ / ↓"]
    rows = []
    for r in fed:
        cells = []
        for c in r.clients:
            idle = idle_fraction(c)
            cells.append(
                f"↑{c.bytes_up / MB:.1f} ↓{c.bytes_down / MB:.1f} MB, {c.syncs} syncs, "
                f"idle {fmt(None if idle is None else 100 * idle, '.0f')}%"
            )
        cells += [""] * (n - len(cells))
        up, down = sum(c.bytes_up for c in r.clients), sum(c.bytes_down for c in r.clients)
        rows.append([label(r), *cells, f"{up / MB:.1f} / {down / MB:.1f}"])
    return markdown(head, rows)


@dataclass(frozen=True)
class RatePoint:
    """One codec's place on the rate-distortion plane (means over the run's pushes and clients)."""

    method: str
    codec: str
    scales: str
    error_feedback: bool
    bytes_per_param: float
    wire_up_per_push: float
    tail_loss: float
    """Time-averaged global eval loss over the last quarter of the budget (less noisy than the last value)."""
    final_loss: float
    tokens: int
    pushes: int
    curve: tuple[CurvePoint, ...] = ()
    """The run's loss curve, for the equal-tokens comparison."""


def rate_point(run: RunResult, codec: CodecConfig) -> RatePoint | None:
    """Encoded bytes per parameter per push and the late loss of one run; None if it never pushed."""
    pushes = sum(c.syncs - c.statuses.get("STALE", 0) for c in run.clients)
    if not pushes or not run.curve or not run.numel:
        return None
    payload = sum(c.payload_bytes for c in run.clients)
    plain = codec.name in ("fp32", "bf16")
    name = codec.name if plain else f"{codec.name}+{codec.entropy}"
    scales = (
        "—" if plain else (f"per block of {codec.block_scales}" if codec.block_scales else "global min-max")
    )
    return RatePoint(
        method=run.method,
        codec=name,
        scales=scales,
        error_feedback=codec.error_feedback and codec.name != "fp32",
        bytes_per_param=payload / pushes / run.numel,
        wire_up_per_push=sum(c.bytes_up for c in run.clients) / pushes,
        tail_loss=tail_mean(run.curve, (1 - TAIL) * run.budget_s, run.budget_s),
        final_loss=run.curve[-1].loss,
        tokens=run.tokens,
        pushes=pushes,
        curve=tuple(run.curve),
    )


def equal_token_losses(points: Sequence[RatePoint]) -> dict[str, float]:
    """Per method: mean loss of its versions with tokens in [0.8, 1] × the fewest tokens any run reached."""
    n_eq = min((p.tokens for p in points), default=0)
    return {p.method: token_window_mean(p.curve, int(TOKEN_WINDOW * n_eq), n_eq) for p in points}


def ratedist_table(points: Sequence[RatePoint]) -> str:
    """Rows sorted by bytes per parameter; losses relative to the fp32 run of the same scenario.

    Two losses: late in wall-clock time (what a user waits for: a fatter codec also trains less on thin
    links), and at equal tokens (nearer the codec's own distortion; async ordering still adds noise).
    """
    fp32 = next((p for p in points if p.codec == "fp32"), None)
    n_eq = min((p.tokens for p in points), default=0)
    at_tokens = equal_token_losses(points)

    head = [
        "codec",
        "scales",
        "error feedback",
        "bytes/param/push",
        "× fewer bytes than fp32",
        "wire ↑ kB/push",
        f"loss, mean of last {TAIL:.0%}",
        "Δ vs fp32",
        "final loss",
        f"loss @ {TOKEN_WINDOW:g}–1 × {n_eq / MB:.2f} M tokens",
        "Δ vs fp32 (equal tokens)",
        "tokens (M)",
    ]
    rows = []
    for p in sorted(points, key=lambda p: (p.bytes_per_param, p.method)):
        fewer = fp32.bytes_per_param / p.bytes_per_param if fp32 else None
        rows.append(
            [
                p.codec,
                p.scales,
                "on" if p.error_feedback else "off",
                f"{p.bytes_per_param:.3f}",
                fmt(fewer, ".1f") + ("×" if fewer else ""),
                f"{p.wire_up_per_push / 1e3:.0f}",
                f"{p.tail_loss:.3f}",
                pct(p.tail_loss / fp32.tail_loss - 1 if fp32 else None),
                f"{p.final_loss:.3f}",
                fmt(at_tokens[p.method]),
                pct(at_tokens[p.method] / at_tokens[fp32.method] - 1 if fp32 else None),
                f"{p.tokens / MB:.2f}",
            ]
        )
    return markdown(head, rows)


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub table; '|' inside cells is escaped so a cell can never split a row."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    bad = [i for i, r in enumerate(rows) if len(r) != len(head)]
    if bad:
        raise ValueError(f"rows {bad} do not have {len(head)} cells")
    return "\n".join([line(head), line(["---"] * len(head)), *map(line, rows)])
