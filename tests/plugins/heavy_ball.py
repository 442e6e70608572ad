"""An outer optimizer geofed does not ship, its facts declared once: heavy-ball (Polyak) momentum on Δ.

u = η·buf with buf ← μ·buf + Δ. Its own η keeps a delta's total weight η/(1 − μ) at FedAvg's 0.5, its step
carries momentum when μ > 0 and, at full length, honest deltas then point back (no consensus bound).
Its PS step is `tests.plugins.heavy_ball_ps`, listed after this module in `GEOFED_PLUGINS`.
"""

from __future__ import annotations

from geofed.outer_optimizers import FEDAVG_LR, OuterSpec

HEAVY_BALL = OuterSpec(
    "heavy_ball",
    lr=lambda cfg: FEDAVG_LR * (1.0 - cfg.momentum),
    momentum=lambda cfg: cfg.momentum > 0,
    deltas_agree=lambda cfg: cfg.momentum == 0,
)
