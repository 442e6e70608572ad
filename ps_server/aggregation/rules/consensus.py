"""The consensus bound as a rule: a delta may not push far against the other sites (`aggregation.consensus`)."""

from __future__ import annotations

from .rule import PASS, Delta, Guard, Rule, Verdict


class ConsensusRule(Rule):
    """A delta's upper-median projection on the other sites' directions is at least −0.1 × its reference, and
    its site's window's with it at least −0.25 × that."""

    name = "consensus"

    def check(self, delta: Delta, guard: Guard) -> Verdict:
        if delta.sketch is None:
            return PASS
        _, start = guard.limits(delta.snapshot, delta.push.numel)
        factor = guard.consensus.scale(delta.site, delta.sketch, guard.norms.reference(delta.site, start))
        return Verdict(factor) if factor < 1.0 else PASS
