"""The PS's rules: what every delta passes before any strategy folds it, one file per rule.

Built in, in the order `DeltaGuard` runs them (`BUILT_IN`): the norm bound, the consensus bound, the
displacement budget and a site's share of a round. A rule from outside geofed declares itself by subclassing
`Rule` in a module `GEOFED_PLUGINS` names, and runs right after the rule its `after` names (after every
built-in one when it names none).
"""

from __future__ import annotations

from .consensus import ConsensusRule
from .displacement import DisplacementRule
from .norm_bound import NormBoundRule
from .round_share import RoundShareRule
from .rule import PASS, RULES, Delta, Guard, Rule, Verdict

BUILT_IN: tuple[type[Rule], ...] = (NormBoundRule, ConsensusRule, DisplacementRule, RoundShareRule)

__all__ = ["BUILT_IN", "PASS", "RULES", "Delta", "Guard", "Rule", "Verdict", "ordered_rules"]


def ordered_rules() -> tuple[type[Rule], ...]:
    """Every declared rule in the order a guard runs them: `BUILT_IN`'s, each other one right after the rule
    its `after` names (built in, or declared before it; several after one rule in the order they were
    declared), else at the end."""
    order = list(BUILT_IN)
    for cls in RULES.values():
        if cls in BUILT_IN:
            continue
        if not cls.after:
            order.append(cls)
            continue
        names = [c.name for c in order]
        if cls.after not in names:
            raise ValueError(f"PS rule {cls.name!r} runs after {cls.after!r}, which is not a declared rule")
        at = names.index(cls.after) + 1
        while at < len(order) and order[at].after == cls.after and order[at] not in BUILT_IN:
            at += 1
        order.insert(at, cls)
    return tuple(order)
