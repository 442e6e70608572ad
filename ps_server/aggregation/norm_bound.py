"""The default-on norm bound: no single site moves the model much further than an honest site does.

The unit is the *site* (every client id a site credential mints shares its site's entry), and each delta
of site s is scaled down, before any strategy sees it, to at most

    limit(s) = min(ceiling, multiple × median over the other sites' norms)     when another site has pushed,
               min(ceiling, start, multiple × s's own norm)                    when only s has pushed,
               min(ceiling, start)                                             for the federation's first delta,

where a site's norm is the median of its own latest `OWN_HISTORY` accepted (bounded) norms. A site's limit
never depends on its own history once another site has pushed, so an attacker cannot ratchet its bound up
by pushing at the limit; one entry per site, so minting client ids or pushing often buys no votes; and the
median over the *others* means that with two sites the hostile one is bounded by the honest one's norms.

`ceiling` is the most the inner optimizer can move the exchanged vector in one sync: AdamW moves each
parameter by at most lr·max(1, (1 − β1)/√(1 − β2)) per step (Kingma & Ba, §2.1), plus its decoupled weight
decay lr·wd·|θ|, so ‖δ‖ ≤ a·lr·H·(√n + wd·‖θ‖) for H local steps (10% slack for error feedback's carried
quantisation residual). `start` is that bound for H steps that do not all point the same way,
`START_FACTOR`·a·lr·√H·(√n + wd·‖θ‖) (the ceiling over √H, doubled): real AdamW deltas of the default
model measure 0.47 of it in their first round and 0.25-0.3 later (docs/reliability.md), so it bounds the
first deltas of a federation within about 2 × an honest one, where the ceiling alone allowed about 7 ×.

Staleness is accounted for after the bound: a stale delta is bounded like any other and then shrunk by its
staleness factor. Works at any buffer size, K = 1 included, because it compares each delta with history,
not with its round. Plain Python over numpy, no gRPC: the guard applies it to the decoded update of every
strategy (`BoundedPayload`).
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque

import numpy as np

CEILING_SLACK = 1.1  # error feedback adds at most half a quantisation step per element to a delta
START_FACTOR = 2.0  # the start bound over the ceiling/√H
OWN_HISTORY = 5  # accepted norms per site its entry is the median of


def adam_step(beta1: float, beta2: float) -> float:
    """Adam's per-parameter step bound, in units of lr."""
    return max(1.0, (1.0 - beta1) / math.sqrt(1.0 - beta2))


def adamw_ceiling(*, lr: float, local_steps: int, numel: int, weight_decay: float, theta_norm: float,
                  beta1: float = 0.9, beta2: float = 0.95) -> float:
    """The largest L2 norm an honest AdamW client's delta can have after `local_steps` steps."""
    return (CEILING_SLACK * lr * adam_step(beta1, beta2) * max(1, local_steps)
            * (math.sqrt(max(1, numel)) + weight_decay * theta_norm))


def start_bound(training, numel: int, theta_norm: float) -> float:
    """The bound of a federation's first deltas: the AdamW ceiling over √H, times START_FACTOR (see above)."""
    ceiling = adamw_ceiling(lr=training.lr, local_steps=training.local_steps, numel=numel,
                            weight_decay=training.weight_decay, theta_norm=theta_norm, beta1=training.adam_beta1,
                            beta2=training.adam_beta2)
    return START_FACTOR * ceiling / math.sqrt(max(1, training.local_steps))


class NormBound:
    """Recent accepted delta norms per site (`window` sites, the latest kept); `multiple` = 0 turns it off."""

    def __init__(self, multiple: float, window: int) -> None:
        self.multiple, self.window = multiple, window
        self.norms: OrderedDict[str, deque[float]] = OrderedDict()  # site -> its latest accepted norms

    @property
    def enabled(self) -> bool:
        return self.multiple > 0

    def _norm_of(self, site: str) -> float:
        return statistics.median(self.norms[site])

    def reference(self, site: str, start: float = math.inf) -> float:
        """The norm `site`'s limit is `multiple` times: the other sites' median, else its own within the start."""
        others = [self._norm_of(s) for s in self.norms if s != site]
        if others:
            return statistics.median(others)
        if site in self.norms:
            return min(start / self.multiple, self._norm_of(site))
        return start / self.multiple

    def limit(self, site: str, ceiling: float, start: float = math.inf) -> float:
        """The largest norm a delta of `site` may have now (inf when off)."""
        if not self.enabled:
            return math.inf
        return min(ceiling, self.multiple * self.reference(site, start))

    def scale(self, site: str, norm: float, ceiling: float, start: float = math.inf) -> float:
        """Factor (≤ 1) that brings a delta of `norm` within `site`'s limit."""
        limit = self.limit(site, ceiling, start)
        return limit / norm if norm > limit else 1.0

    def record(self, site: str, norm: float) -> None:
        """Remember an accepted delta's (bounded) norm in its site's history; a zero delta says nothing."""
        if not self.enabled or not (norm > 0 and math.isfinite(norm)):
            return
        history = self.norms.pop(site, None) or deque(maxlen=OWN_HISTORY)
        history.append(norm)
        self.norms[site] = history
        while len(self.norms) > self.window:
            self.norms.popitem(last=False)

    def state_dict(self) -> list[list]:
        return [[s, list(h)] for s, h in self.norms.items()]

    def load_state_dict(self, state: list[list]) -> None:
        self.norms = OrderedDict()
        for site, norms in state:
            for norm in norms if isinstance(norms, list) else [norms]:  # a bare number: one norm per entry
                self.record(str(site), float(norm))


class BoundedPayload:
    """A received push seen through the norm bound's factor: what every strategy folds.

    Values are scaled in float64 and rounded once, so even a factor far below float32's normal range
    (an attacker's 1e19-sized delta) lands as an exactly bounded float32 vector.
    """

    def __init__(self, push, scale: float, site: str = "", rule: str = "", history_norm: float | None = None) -> None:
        self._push, self.scale = push, scale
        self.rule = rule  # the rule that scaled it down ("norm_bound", "consensus", "displacement_budget"), "" if none
        self.client_id, self.numel, self.header = push.client_id, push.numel, push.header
        self.site = site or push.client_id  # the unit robust windows and quotas count
        self.norm = push.norm * scale
        # What the site's norm history records: the delta's length within the per-delta bounds, before the
        # displacement budget, so a site whose deltas that budget shrinks does not shrink the other sites' bounds.
        self.history_norm = self.norm if history_norm is None else history_norm

    @property
    def received(self):
        """The push as it was received (unscaled)."""
        return self._push

    def iter_values(self, max_numel: int):
        for off, values in self._push.iter_values(max_numel):
            yield off, self._scaled(values)

    def iter_sparse(self, max_numel: int):
        """(positions, values) of a sparse-coded push, bounded like `iter_values`."""
        for pos, values in self._push.iter_sparse(max_numel):
            yield pos, self._scaled(values)

    def _scaled(self, values: np.ndarray) -> np.ndarray:
        return values if self.scale == 1.0 else (values.astype(np.float64) * self.scale).astype(np.float32)

