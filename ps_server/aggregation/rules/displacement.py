"""The displacement budget as a rule: what a site's latest deltas add up to is bounded
(`aggregation.displacement`)."""

from __future__ import annotations

from .rule import PASS, Delta, Guard, Rule, Verdict


class DisplacementRule(Rule):
    """A delta is scaled down until its site's window, with it, adds up to at most the site's budget."""

    name = "displacement_budget"

    def check(self, delta: Delta, guard: Guard) -> Verdict:
        if delta.sketch is None:
            return PASS
        _, start = guard.limits(delta.snapshot, delta.push.numel)
        factor = guard.budget.scale(delta.site, delta.sketch, guard.norms.reference(delta.site, start))
        return Verdict(factor) if factor < 1.0 else PASS
