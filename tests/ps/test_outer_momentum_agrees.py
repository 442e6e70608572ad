"""The settings' `outer_momentum` (which the client reads to keep off the overlapped path) says what the PS's
outer optimizers say in `carries_momentum` (which turns the consensus bound off), for every outer optimizer."""

from __future__ import annotations

import pytest

from geofed.config import AggregationConfig
from ps_server.aggregation.outer import OUTER_OPTIMIZERS


@pytest.mark.parametrize("name", ["fedavg", "nesterov", "adam"])
@pytest.mark.parametrize("coefficient", [0.0, 0.9])
def test_outer_momentum_matches_the_outer_optimizer(name, coefficient):
    cfg = AggregationConfig(outer_optimizer=name, momentum=coefficient, beta1=coefficient)
    assert cfg.outer_momentum == OUTER_OPTIMIZERS[name].carries_momentum(cfg)
    assert cfg.outer_momentum == (name != "fedavg" and coefficient > 0)  # by hand: FedAvg never carries any
