"""The norm bound as a rule: each delta scaled down to its site's bound (`aggregation.norm_bound`)."""

from __future__ import annotations

from .rule import PASS, Delta, Guard, Rule, Verdict


class NormBoundRule(Rule):
    """A delta (under FedNova, as the round applies it) is at most its site's limit long."""

    name = "norm_bound"
    bounds_length = True

    def check(self, delta: Delta, guard: Guard) -> Verdict:
        push = delta.push
        factor = guard.scale(push.client_id, push.norm, delta.local_steps, delta.snapshot, push.numel)
        return Verdict(factor) if factor < 1.0 else PASS
