"""Parameter-space averaging of client deltas with an outer optimizer (FedAvg / DiLoCo / FedAdam).

The strategy of every paradigm whose exchanged vector is a slice of the model's own parameters
(pretraining, BitFit, LoRA's adapters): δ's are weighted by tokens × staleness, clipped, summed in one
running buffer (or kept on disk, in a window of recent clients, for order statistics), averaged, and
stepped by the outer optimizer in place: θ_new = θ + outer(mean δ). The Aggregator has already vouched
for the token count and bounded the delta's norm; the sum refuses a delta that could overflow it.
"""

from __future__ import annotations

import logging

import numpy as np

from geofed.config import FederationConfig

from ...errors import InvalidPush
from ...global_model import Manifest, Snapshot
from ..accumulator import DeltaAccumulator
from ..centred_clip import CentredClip
from ..outer import OuterOptimizer, build_outer_optimizer, restore_outer
from ..outer_bound import OuterBound
from ..robust import RobustRound, RobustWindow
from ..rounds import Admission
from ..strategy import Accumulator, Payload, RoundSum, Strategy
from ..weighting import base_weight, clip_scale, delta_scale

# Largest Σ scale·‖δ‖ a round may hold: every element of the sum stays below it, far under float32's 3.4e38,
# so neither the sum, its mean nor the outer step's products can overflow.
MAX_ROUND_MASS = 1e30

log = logging.getLogger("geofed.ps")


class DeltaAveraging(Strategy):
    """Algorithm 1's weighted mean of δ's, followed by the configured outer step."""

    centred_clipping = True
    """Whether aggregation.centred_clip applies: the payloads are dense deltas of the exchanged vector."""

    def __init__(self, fed: FederationConfig) -> None:
        super().__init__(fed)
        self.outer: OuterOptimizer | None = None
        self.outer_mode = ""  # the live mode whose η the outer optimizer steps with
        self.outer_bound = OuterBound(fed.aggregation.norm_bound_multiple)
        self.window: RobustWindow | None = None
        self.centred = CentredClip(0.0, 0)

    def install(self, numel: int, manifest: Manifest) -> None:
        self.outer = build_outer_optimizer(self.cfg, numel)
        self.outer_mode = self.cfg.mode
        self.outer_bound = OuterBound(self.cfg.norm_bound_multiple)
        multiple = self.cfg.centred_clip if self.centred_clipping and self.cfg.robust == "none" else 0.0
        self.centred = CentredClip(multiple, numel)
        if self.window is not None:
            self.window.clear()
        self.window = None
        if self.cfg.robust != "none":
            self.window = RobustWindow(numel, self.cfg.robust, self.cfg.trim_fraction, self.cfg.robust_window)

    def payload_numel(self, snapshot: Snapshot) -> int:
        return snapshot.flat.size

    def open_round(self, snapshot: Snapshot) -> Accumulator:
        if self.window is not None:
            if self.cfg.mode == "sync":  # a synchronous round's statistics are over that round's deltas
                self.window.clear()
            return RobustRound(self.window, self.cfg, snapshot.version)
        return DeltaAccumulator(snapshot.flat.size)

    def fold(self, acc: Accumulator, push: Payload, admission: Admission, *, num_tokens: int,
             local_steps: int) -> float:
        base = base_weight(self.cfg, num_tokens, local_steps)
        weight = base * admission.factor
        clip = clip_scale(push.norm, self.cfg.clip_norm)
        # Order statistics ignore weights (a poisoned client must not buy influence with a token count);
        # the window weights each entry by its staleness when the round closes.
        robust = isinstance(acc, RobustRound)
        scale = clip if robust else delta_scale(self.cfg, weight, local_steps) * clip
        if acc.mass + scale * push.norm > MAX_ROUND_MASS:
            raise InvalidPush("overflow", f"a delta of norm {push.norm:.3g} would overflow the round's sum; "
                              "it was not folded in")
        self.check_payload(push)
        if self.centred.enabled and not robust:
            self.add_centred(acc, push, scale)
        else:
            self.add_payload(acc, push, scale)
        acc.mass += scale * push.norm
        if robust:
            # One window entry per site: a site's client ids replace each other's entry, they never add one.
            acc.commit(getattr(push, "site", push.client_id), base, local_steps,
                       base_version=acc.version - admission.staleness)
        else:
            # Normalise by the *base* weight: the staleness factor must shrink a stale delta, not cancel out
            # (with K = 1, dividing by w·f would apply every delta at full strength however stale it is).
            acc.commit(push.client_id, base, local_steps)
        return weight

    def check_payload(self, push: Payload) -> None:  # noqa: B027 - optional hook
        """Refuse (InvalidPush) a payload this strategy must not fold, before anything of it is added."""

    def add_centred(self, acc: Accumulator, push: Payload, scale: float) -> None:
        """Add scale · (s·δ + (1 − s)·c): δ's deviation from the centre c clipped (centred_clip.py)."""
        s, dev, tau = self.centred.factor(push.iter_values(acc.numel), push.norm)
        self.add_payload(acc, push, scale * s)
        if s < 1.0:
            self.centred.add_centre(acc.add, scale * (1.0 - s))
            log.info("event=delta_bounded client=%r site=%r rule=centred_clip factor=%.4g deviation=%.4g radius=%.4g",
                     push.client_id, getattr(push, "site", push.client_id), s, dev, tau)  # fmt: skip

    def add_payload(self, acc: Accumulator, push: Payload, scale: float) -> None:
        """Add scale · δ to the round (decoded piece by piece)."""
        for off, values in push.iter_values(acc.numel):
            acc.add(off, values, scale)

    def close(self, acc: Accumulator) -> RoundSum:
        mean = acc.combine() if isinstance(acc, RobustRound) else acc.mean_(self.cfg.fednova)
        acc.close()
        return RoundSum(mean, acc.count, frozenset(acc.clients), acc.weight)

    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        """ϕ ← ϕ + outer(mean δ), built in the round sum's own buffer: no extra model-sized allocation."""
        update = round_sum.delta
        self.outer_step_(update)
        update += snapshot.flat
        return update

    def outer_step_(self, update: np.ndarray) -> None:
        """Turn the round's combined update into the outer optimizer's increment, in place, both bounded
        (outer_bound): the pseudo-gradient before the optimizer's state sees it, the step (and the momentum
        it leaves) after."""
        assert self.outer is not None, "install() first"
        if self.centred.enabled:
            self.centred.update_(update)
        self.outer_bound.gradient.bound_(update)
        if self.cfg.mode != self.outer_mode:  # aggregation.mode auto switched: step with the new mode's η
            self.outer.lr, self.outer_mode = self.cfg.outer_lr, self.cfg.mode
        self.outer.increment_(update)
        factor = self.outer_bound.step.bound_(update)
        if factor < 1.0:
            self.outer.scale_state_(factor)
            log.info("event=outer_step_bounded factor=%.4g", factor)

    def state_dict(self) -> dict:
        if not self.outer:
            return {}
        state = {"outer": self.outer.state_dict(), "outer_bound": self.outer_bound.state_dict()}
        return state | ({"centred_clip": self.centred.state_dict()} if self.centred.enabled else {})

    def load_state_dict(self, state: dict) -> None:
        self.outer_bound.load_state_dict(state.get("outer_bound", {}))
        self.centred.load_state_dict(state.get("centred_clip", {}))
        if self.outer is not None and state.get("outer"):
            why = restore_outer(self.outer, state["outer"])
            if why is not None:
                log.warning("event=outer_state_reset reason=%r", why)
