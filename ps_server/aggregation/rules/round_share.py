"""A site's share of a round as a rule: in async mode a site lands at most ⌈norm_bound_multiple⌉ deltas, adding
up to at most its bound, while the other sites train one each (see `guard`); beyond that a delta is refused."""

from __future__ import annotations

import numpy as np

from ...errors import RoundShareSpent
from .rule import PASS, Delta, Guard, Rule, Verdict


class RoundShareRule(Rule):
    """Refuses (`RoundShareSpent`, reason round_share) a delta that would take its site's round beyond its share."""

    name = "round_share"
    refusal = RoundShareSpent

    def check(self, delta: Delta, guard: Guard) -> Verdict:
        """A refusal when the site's current round would hold more than ⌈norm_bound_multiple⌉ of its deltas, or
        they would add up to more than its bound (the length of their sum, from the sketches of the deltas as
        folded; the sum of their lengths where a sketch is missing). PASS in sync mode (a round is explicit
        there, and the site quota holds a site to one delta in it), when the bound or the rule is off, and for
        a paradigm whose updates do not add up, such as zeroth-order scalars."""
        if delta.mode != "async" or not guard.norms.enabled:
            return PASS
        if not (guard.fed.aggregation.round_share and guard.fed.paradigm.cumulative):
            return PASS
        site = delta.site
        landed = guard.in_round(site)
        if landed == 0:
            return PASS
        if landed >= guard.round_deltas:
            return Verdict(reason="round_share", message=(
                f"round share: site {site!r} already landed {landed} deltas since the other sites last pushed, "
                f"the most a site lands in one round; push again once they have"))
        norm = guard.bound_norm(delta.push.norm, delta.local_steps) * delta.scale  # as the round applies it
        limit = guard.norms.limit(site, *guard.limits(delta.snapshot, delta.push.numel))
        window = guard.budget.windows.get(site)
        if delta.sketch is not None and window is not None and len(window) >= landed:
            total = np.sum(list(window)[-landed:], axis=0) + delta.sketch
            beyond = float(np.linalg.norm(total)) > limit * (1 + 1e-9)
        else:
            beyond = sum(list(guard.norms.norms.get(site, ()))[-landed:]) + norm > limit * (1 + 1e-9)
        if beyond:
            return Verdict(reason="round_share", message=(
                f"round share: site {site!r} already landed deltas adding up to its bound since the other sites "
                "last pushed, and this one would go beyond it; push again once they have"))
        return PASS
