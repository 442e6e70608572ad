"""Pure arithmetic over loss curves: loss at a wall-clock checkpoint, time to a target, equal-token loss.

A federated run's global model changes only when the PS publishes a version, so its curve is a step
function: at time t the model is the newest version published at or before t. Time to target is the
publication time of the first version whose held-out loss is at or below the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .results import CurvePoint, RunResult


def loss_at(curve: Sequence[CurvePoint], t: float) -> float:
    """Eval loss of the newest model published at or before `t`; NaN before the first point."""
    times = np.fromiter((p.t for p in curve), dtype=np.float64, count=len(curve))
    i = int(np.searchsorted(times, t, side="right")) - 1
    return curve[i].loss if i >= 0 else math.nan


def time_to_target(curve: Sequence[CurvePoint], target: float, *, stay: bool = False) -> float | None:
    """Seconds until the first model with loss ≤ `target`; None if the run never got there.

    With `stay`, the time from which every later model stays ≤ `target` (an oscillating run's first lucky
    dip does not count); None if the last model is above it.
    """
    if not stay:
        return next((p.t for p in curve if p.loss <= target), None)
    above = [i for i, p in enumerate(curve) if p.loss > target]
    start = above[-1] + 1 if above else 0
    return curve[start].t if start < len(curve) else None


def tail_mean(curve: Sequence[CurvePoint], start: float, end: float) -> float:
    """Time-average of the step-function loss over [start, end]: a late loss less noisy than one value."""
    if not end > start:
        raise ValueError(f"need end > start, got [{start}, {end}]")
    times = np.fromiter((p.t for p in curve), dtype=np.float64, count=len(curve))
    losses = np.fromiter((p.loss for p in curve), dtype=np.float64, count=len(curve))
    if not len(curve) or times[0] > start:
        return math.nan
    edges = np.concatenate([[start], times[(times > start) & (times < end)], [end]])
    idx = np.searchsorted(times, edges[:-1], side="right") - 1
    return float(np.sum(losses[idx] * np.diff(edges)) / (end - start))


def token_window_mean(curve: Sequence[CurvePoint], lo: int, hi: int) -> float:
    """Mean loss of the versions with `lo` ≤ tokens ≤ `hi`: compares runs at equal tokens, not equal time."""
    losses = [p.loss for p in curve if lo <= p.tokens <= hi]
    return float(np.mean(losses)) if losses else math.nan


def best_loss(curve: Sequence[CurvePoint]) -> float:
    """Lowest eval loss any published model reached (NaN for an empty curve)."""
    return min((p.loss for p in curve), default=math.nan)


def loss_at_tokens(curve: Sequence[CurvePoint], tokens: int) -> float | None:
    """Loss of a token-indexed curve (the single-process baseline) at `tokens`, linearly interpolated.

    None when `tokens` lies beyond the curve: the baseline was not trained that far, so no honest value.
    """
    if not curve or tokens > curve[-1].tokens or tokens < curve[0].tokens:
        return None
    xs = np.array([p.tokens for p in curve], dtype=np.float64)
    ys = np.array([p.loss for p in curve], dtype=np.float64)
    return float(np.interp(tokens, xs, ys))


def speedup(reference_s: float | None, ours_s: float | None) -> float | None:
    """How many times sooner `ours` reached the target than the reference (None if either did not)."""
    if reference_s is None or ours_s is None:
        return None
    return reference_s / max(ours_s, 1e-9)


def auto_target(runs: Sequence[RunResult], reference: str = "fedavg") -> float | None:
    """The default target: the best loss the reference (sync FedAvg) reached within the budget; with
    repeats, the highest of their bests, so that every reference run reaches it."""
    losses = [best_loss(r.curve) for r in runs if r.method == reference and r.curve]
    return max(losses) if losses else None


def thin_versions(
    published: Sequence[tuple[int, float]], budget_s: float, max_n: int
) -> list[tuple[int, float]]:
    """At most ~`max_n` (version, t) pairs to evaluate: the newest version at each of `max_n` evenly spaced
    times, plus the first and the last; every version is kept when there are few enough."""
    if len(published) <= max_n:
        return list(published)
    times = np.array([t for _, t in published], dtype=np.float64)
    grid = np.linspace(0.0, budget_s, max_n)
    picks = np.searchsorted(times, grid, side="right") - 1
    keep = sorted({0, len(published) - 1, *(int(i) for i in picks[picks >= 0])})
    return [published[i] for i in keep]


def cumulative_at(keys: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each `at`, the sum of `values` whose key is ≤ it (keys in any order): tokens behind version V."""
    order = np.argsort(keys, kind="stable")
    cum = np.concatenate([[0], np.cumsum(values[order])])
    return cum[np.searchsorted(keys[order], at, side="right")]
