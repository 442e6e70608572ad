"""The default-on norm bound (issue 10): no single delta moves the model much further than honest ones do.

Every delta is scaled down, before any strategy sees it, to at most

    limit = min(ceiling, multiple × median of the latest accepted norms of distinct clients)

where `ceiling` is the most the inner optimizer can move the exchanged vector in one sync: AdamW moves
each parameter by at most lr·max(1, (1 − β1)/√(1 − β2)) per step (Kingma & Ba, §2.1: lr for the usual
betas, (0.9, 0.95) included), plus its decoupled weight decay lr·wd·|θ|, so ‖δ‖ ≤ a·lr·H·(√n + wd·‖θ‖) for
H local steps (10% slack for error feedback's carried quantisation residual), where a is that factor.
Until `MIN_CLIENTS` distinct clients have pushed, the ceiling alone bounds a delta: the first push of a
federation can be an attack, and a median of one or two norms is the attacker's own. The median is over
clients, not pushes (one entry per client, the latest), so a client
that pushes often holds one vote; it records the norm *after* bounding, so a clipped attacker cannot
ratchet the median up. Staleness is accounted for after the bound: a stale delta is bounded like any
other and then shrunk by its staleness factor, so it moves the model less, never more.

Works at any buffer size, K = 1 included, because it compares each delta with history, not with its
round. Plain Python over numpy, no gRPC: the Aggregator applies it to the decoded update of every
strategy (`BoundedPayload`).
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict

import numpy as np

MIN_CLIENTS = 3  # distinct clients before the median takes over from the AdamW ceiling
CEILING_SLACK = 1.1  # error feedback adds at most half a quantisation step per element to a delta


def adamw_ceiling(*, lr: float, local_steps: int, numel: int, weight_decay: float, theta_norm: float,
                  beta1: float = 0.9, beta2: float = 0.95) -> float:
    """The largest L2 norm an honest AdamW client's delta can have after `local_steps` steps."""
    step = max(1.0, (1.0 - beta1) / math.sqrt(1.0 - beta2))  # Adam's per-parameter step bound, in units of lr
    return CEILING_SLACK * lr * step * max(1, local_steps) * (math.sqrt(max(1, numel)) + weight_decay * theta_norm)


class NormBound:
    """Running median of recent accepted delta norms from distinct clients; `multiple` = 0 turns it off."""

    def __init__(self, multiple: float, window: int) -> None:
        self.multiple, self.window = multiple, window
        self.norms: OrderedDict[str, float] = OrderedDict()  # client -> norm of its latest accepted delta

    @property
    def enabled(self) -> bool:
        return self.multiple > 0

    def limit(self, ceiling: float) -> float:
        """The largest norm a delta may have now (inf when off)."""
        if not self.enabled:
            return math.inf
        if len(self.norms) < MIN_CLIENTS:
            return ceiling
        return min(ceiling, self.multiple * statistics.median(self.norms.values()))

    def scale(self, norm: float, ceiling: float) -> float:
        """Factor (≤ 1) that brings a delta of `norm` within the limit."""
        limit = self.limit(ceiling)
        return limit / norm if norm > limit else 1.0

    def record(self, client_id: str, norm: float) -> None:
        """Remember an accepted delta's (bounded) norm as its client's latest; a zero delta says nothing."""
        if not self.enabled or not (norm > 0 and math.isfinite(norm)):
            return
        self.norms.pop(client_id, None)
        self.norms[client_id] = norm
        while len(self.norms) > self.window:
            self.norms.popitem(last=False)

    def state_dict(self) -> list[list]:
        return [[c, n] for c, n in self.norms.items()]

    def load_state_dict(self, state: list[list]) -> None:
        self.norms = OrderedDict()
        for client_id, norm in state:
            self.record(str(client_id), float(norm))


class BoundedPayload:
    """A received push seen through the norm bound's factor: what every strategy folds.

    Values are scaled in float64 and rounded once, so even a factor far below float32's normal range
    (an attacker's 1e19-sized delta) lands as an exactly bounded float32 vector.
    """

    def __init__(self, push, scale: float) -> None:
        self._push, self.scale = push, scale
        self.client_id, self.numel, self.header = push.client_id, push.numel, push.header
        self.norm = push.norm * scale

    def iter_values(self, max_numel: int):
        for off, values in self._push.iter_values(max_numel):
            yield off, self._scaled(values)

    def iter_sparse(self, max_numel: int):
        """(positions, values) of a sparse-coded push, bounded like `iter_values`."""
        for pos, values in self._push.iter_sparse(max_numel):
            yield pos, self._scaled(values)

    def _scaled(self, values: np.ndarray) -> np.ndarray:
        return values if self.scale == 1.0 else (values.astype(np.float64) * self.scale).astype(np.float32)
