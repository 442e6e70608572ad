"""Held-out loss of every global version a run published, evaluated after the run, off the clock.

The PS checkpoints each new version (`--checkpoint-every 1`, nothing pruned during a benchmark); a
checkpoint's mtime is when that version existed. Evaluating after the run keeps the harness from
competing with the clients for the two CPU cores while they train. The evaluator is `geofed local`'s
(`geofed_apps.evaluate`: same held-out modules, same fixed batches), so numbers match that command's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from geofed_apps.evaluate import load_flat, published

from .analysis import cumulative_at, thin_versions
from .results import CurvePoint


def evaluate_versions(
    ckpt_dir: Path,
    t0_wall: float,
    budget_s: float,
    max_evals: int,
    loss_of: Callable[[np.ndarray], float],
    delta_versions: np.ndarray,
    delta_tokens: np.ndarray,
) -> list[CurvePoint]:
    """The run's loss curve: versions published within the budget (thinned to ~`max_evals`), t from t0.

    Tokens behind version V = tokens of the recorded deltas that first landed in a version ≤ V.
    """
    versions = [
        (v, mtime - t0_wall, path) for v, mtime, path in published(ckpt_dir) if mtime - t0_wall <= budget_s
    ]
    if not versions:
        return []
    paths = {v: p for v, _, p in versions}
    picked = thin_versions([(v, max(0.0, t)) for v, t, _ in versions], budget_s, max_evals)
    tokens = cumulative_at(delta_versions, delta_tokens, np.array([v for v, _ in picked], dtype=np.int64))
    return [
        CurvePoint(t=round(t, 3), version=v, loss=round(loss_of(load_flat(paths[v])), 5), tokens=int(n))
        for (v, t), n in zip(picked, tokens, strict=True)
    ]
