"""Which outer steps carry momentum (the settings' `outer_momentum`, which keeps a client off the overlapped path),
and where the consensus bound applies (the outer optimizers' `deltas_agree`), for every outer optimizer; the
expected values are written out by hand."""

from __future__ import annotations

import typing

import pytest

from geofed.config import AggregationConfig, FederationConfig
from ps_server.aggregation.guard import DeltaGuard
from ps_server.aggregation.outer import OUTER_OPTIMIZERS

CASES = [  # (outer optimizer, momentum / beta1, carries momentum, consensus bound applies)
    ("fedavg", 0.0, False, True),
    ("fedavg", 0.9, False, True),
    ("nesterov", 0.0, False, True),
    ("nesterov", 0.9, True, False),
    ("adam", 0.0, False, True),
    ("adam", 0.9, True, True),
]


def test_every_outer_optimizer_is_covered():
    """Every one the settings accept (other test modules may register plug-ins in this process)."""
    shipped = set(typing.get_args(AggregationConfig.model_fields["outer_optimizer"].annotation))
    assert {name for name, *_ in CASES} == shipped and shipped <= set(OUTER_OPTIMIZERS)


@pytest.mark.parametrize(("name", "coefficient", "momentum", "applies"), CASES)
def test_momentum_and_the_consensus_bound_per_outer_optimizer(name, coefficient, momentum, applies):
    """Nesterov's momentum overshoots and honest deltas point back against it; Adam's is normalised."""
    agg = {"outer_optimizer": name, "momentum": coefficient, "beta1": coefficient}
    assert AggregationConfig(**agg).outer_momentum is momentum
    assert DeltaGuard(FederationConfig.model_validate({"aggregation": agg})).consensus.enabled is applies
