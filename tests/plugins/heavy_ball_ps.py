"""The PS's heavy-ball step (`tests.plugins.heavy_ball`): buf ← μ·buf + Δ, then Δ becomes η·buf, in place."""

from __future__ import annotations

import numpy as np

from geofed.config import AggregationConfig
from ps_server.aggregation.outer import OuterOptimizer
from tests.plugins.heavy_ball import HEAVY_BALL


class HeavyBall(OuterOptimizer):
    """Polyak momentum on the averaged delta; the buffer is its state across rounds and restarts."""

    spec = HEAVY_BALL

    @classmethod
    def build(cls, cfg: AggregationConfig, numel: int) -> HeavyBall:
        return cls(cfg.outer_lr, cfg.momentum, numel)

    def __init__(self, lr: float, momentum: float, numel: int) -> None:
        self.lr, self.momentum = lr, momentum
        self.buf = np.zeros(numel, dtype=np.float32)

    def increment_(self, delta: np.ndarray) -> None:
        self.buf *= np.float32(self.momentum)
        self.buf += delta
        np.multiply(self.buf, np.float32(self.lr), out=delta)

    def scale_state_(self, factor: float) -> None:
        self.buf *= np.float32(factor)

    def state_dict(self) -> dict:
        return {"name": self.name, "buf": self.buf}

    def load_state_dict(self, state: dict) -> None:
        self.buf = np.asarray(state["buf"], dtype=np.float32).copy()
