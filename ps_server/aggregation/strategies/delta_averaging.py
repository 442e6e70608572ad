"""Parameter-space averaging of client deltas with an outer optimizer (FedAvg / DiLoCo / FedAdam).

The strategy of every paradigm whose exchanged vector is a slice of the model's own parameters
(pretraining, BitFit, LoRA's adapters): δ's are weighted by tokens × staleness, clipped, summed in one
running buffer (or kept on disk for order statistics), averaged, and stepped by the outer optimizer in
place: θ_new = θ + outer(mean δ).
"""

from __future__ import annotations

import numpy as np

from geofed.config import FederationConfig

from ...global_model import Manifest, Snapshot
from ..accumulator import DeltaAccumulator
from ..outer import OuterOptimizer, build_outer_optimizer
from ..robust import RobustAccumulator
from ..rounds import Admission
from ..strategy import Accumulator, Payload, RoundSum, Strategy
from ..weighting import base_weight, clip_scale, delta_scale


class DeltaAveraging(Strategy):
    """Algorithm 1's weighted mean of δ's, followed by the configured outer step."""

    def __init__(self, fed: FederationConfig) -> None:
        super().__init__(fed)
        self.outer: OuterOptimizer | None = None

    def install(self, numel: int, manifest: Manifest) -> None:
        self.outer = build_outer_optimizer(self.cfg, numel)

    def payload_numel(self, snapshot: Snapshot) -> int:
        return snapshot.flat.size

    def open_round(self, snapshot: Snapshot) -> Accumulator:
        numel = snapshot.flat.size
        if self.cfg.robust != "none":
            return RobustAccumulator(numel, self.cfg.robust, self.cfg.trim_fraction)
        return DeltaAccumulator(numel)

    def fold(self, acc: Accumulator, push: Payload, admission: Admission, *, num_tokens: int,
             local_steps: int) -> float:
        base = base_weight(self.cfg, num_tokens)
        weight = base * admission.factor
        clip = clip_scale(push.norm, self.cfg.clip_norm)
        # Order statistics ignore weights: a poisoned client must not buy influence with a token count.
        robust = isinstance(acc, RobustAccumulator)
        scale = clip if robust else delta_scale(self.cfg, weight, local_steps) * clip
        numel = acc.numel
        for off, values in push.iter_values(numel):
            acc.add(off, values, scale)
        # Normalise by the *base* weight: the staleness factor must shrink a stale delta, not cancel out
        # (with K = 1, dividing by w·f would apply every delta at full strength however stale it is).
        acc.commit(push.client_id, base, local_steps)
        return weight

    def close(self, acc: Accumulator) -> RoundSum:
        mean = acc.mean_(self.cfg.fednova)
        return RoundSum(mean, acc.count, frozenset(acc.clients), acc.weight)

    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        """ϕ ← ϕ + outer(mean δ), built in the round sum's own buffer: no extra model-sized allocation."""
        assert self.outer is not None, "install() first"
        update = round_sum.delta
        self.outer.increment_(update)
        update += snapshot.flat
        return update

    def state_dict(self) -> dict:
        return {"outer": self.outer.state_dict()} if self.outer else {}

    def load_state_dict(self, state: dict) -> None:
        if self.outer is not None and state.get("outer"):
            self.outer.load_state_dict(state["outer"])
