"""The PS's rules: the guard runs the built-in ones in their declared order, a declared rule where its
`after` places it, and a rule's factor or refusal is what the aggregator folds or refuses."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig, TrainingConfig
from geofed_testing.payloads import MemoryPush
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.guard import DeltaGuard
from ps_server.aggregation.rules import PASS, RULES, Delta, Guard, Rule, Verdict
from ps_server.aggregation.sites import FixedSites
from ps_server.errors import DeltaRefused
from ps_server.global_model import GlobalModel, TensorEntry

N = 64
BUILT_IN = ["norm_bound", "consensus", "displacement_budget", "round_share"]


@pytest.fixture
def declared():
    """The rules a test declares leave `RULES` when it ends."""
    before = set(RULES)
    yield
    for name in set(RULES) - before:
        del RULES[name]


def _federation() -> FederationConfig:
    return FederationConfig(aggregation=AggregationConfig(mode="sync", quorum=1.0, global_lr=1.0),
                            training=TrainingConfig(lr=1e-3, batch_size=16, local_steps=50))


def _values(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(N) * 0.01).astype(np.float32)


def test_the_guard_runs_the_built_in_rules_in_their_declared_order():
    # Execute
    guard = DeltaGuard(_federation())

    # Assert
    assert [rule.name for rule in guard.rules] == BUILT_IN


def test_a_declared_rule_runs_right_after_the_rule_it_names_or_else_last(declared):
    # Prepare
    class First(Rule):
        name, after = "first_check", "norm_bound"

        def check(self, delta: Delta, guard: Guard) -> Verdict:
            return PASS

    class Second(First):
        name = "second_check"

    class Last(First):
        name, after = "last_check", ""

    # Execute
    guard = DeltaGuard(_federation())

    # Assert
    assert [rule.name for rule in guard.rules] == ["norm_bound", "first_check", "second_check", *BUILT_IN[1:],
                                                   "last_check"]


def test_a_rule_placed_after_an_undeclared_rule_stops_the_guard(declared):
    # Prepare
    class Lost(Rule):
        name, after = "lost_check", "no_such_rule"

        def check(self, delta: Delta, guard: Guard) -> Verdict:
            return PASS

    # Execute / Assert
    with pytest.raises(ValueError, match="lost_check.*no_such_rule"):
        DeltaGuard(_federation())


def test_a_rule_is_declared_once():
    # Execute / Assert
    with pytest.raises(ValueError, match="norm_bound"):
        type("Again", (Rule,), {"name": "norm_bound", "check": lambda self, delta, guard: PASS})


def test_a_declared_rules_factor_is_the_bounded_payloads_and_leaves_the_sites_norm_history(declared):
    # Prepare: a rule over more than one delta's length, like the displacement budget
    class Halve(Rule):
        name = "halve"

        def check(self, delta: Delta, guard: Guard) -> Verdict:
            return Verdict(0.5)

    guard = DeltaGuard(_federation())
    push = SimpleNamespace(client_id="a", norm=0.01, numel=N, header=SimpleNamespace(local_steps=50))

    # Execute
    bounded = guard.bound(push, SimpleNamespace(version=1, flat=np.zeros(N, np.float32)))

    # Assert
    assert (bounded.scale, bounded.rule, bounded.norm) == (0.5, "halve", 0.005)
    assert bounded.history_norm == 0.01


def test_a_delta_a_declared_rule_refuses_is_not_folded_and_the_others_are(declared):
    # Prepare
    class RefuseEvil(Rule):
        name = "refuse_evil"

        def check(self, delta: Delta, guard: Guard) -> Verdict:
            if delta.push.client_id.startswith("evil"):
                return Verdict(reason="evil_client", message=f"client {delta.push.client_id!r} is refused")
            return PASS

    a = Aggregator(_federation(), GlobalModel(), sites=FixedSites(2))
    a.restore(1, np.zeros(N, np.float32), (TensorEntry("w", (N,), "float32"),), {})
    honest = _values(1)

    # Execute
    with pytest.raises(DeltaRefused) as refused:
        a.submit(MemoryPush("evil.x", _values(2)))
    accepted = a.submit(MemoryPush("h", honest))
    applied = a.submit(MemoryPush("h2", honest))

    # Assert: refused with the rule's reason; the round held only the other two, and closed on them
    assert (refused.value.reason, refused.value.message) == ("evil_client", "client 'evil.x' is refused")
    assert (accepted.status, applied.status, applied.version) == ("ACCEPTED", "APPLIED", 2)
    assert "evil.x" not in a.ledger
    np.testing.assert_allclose(a.model.current().flat, honest, rtol=1e-6)
