"""The settings' `outer_momentum` (which the client reads to keep off the overlapped path) says what the PS's
outer optimizers say in `carries_momentum`, for every outer optimizer; and where the consensus bound applies."""

from __future__ import annotations

import pytest

from geofed.config import AggregationConfig, FederationConfig
from ps_server.aggregation.guard import DeltaGuard
from ps_server.aggregation.outer import OUTER_OPTIMIZERS


@pytest.mark.parametrize("name", ["fedavg", "nesterov", "adam"])
@pytest.mark.parametrize("coefficient", [0.0, 0.9])
def test_outer_momentum_matches_the_outer_optimizer(name, coefficient):
    cfg = AggregationConfig(outer_optimizer=name, momentum=coefficient, beta1=coefficient)
    assert cfg.outer_momentum == OUTER_OPTIMIZERS[name].carries_momentum(cfg)
    assert cfg.outer_momentum == (name != "fedavg" and coefficient > 0)  # by hand: FedAvg never carries any


@pytest.mark.parametrize(
    ("name", "coefficient", "applies"),
    [("fedavg", 0.0, True), ("adam", 0.9, True), ("adam", 0.0, True), ("nesterov", 0.0, True),
     ("nesterov", 0.9, False)],  # fmt: skip
)
def test_the_consensus_bound_applies_unless_momentum_steps_at_full_length(name, coefficient, applies):
    """Nesterov's momentum overshoots and honest deltas point back against it; Adam's is normalised."""
    fed = FederationConfig.model_validate(
        {"aggregation": {"outer_optimizer": name, "momentum": coefficient, "beta1": coefficient}}
    )
    assert DeltaGuard(fed).consensus.enabled is applies
