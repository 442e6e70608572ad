"""global_lr unset: each outer optimizer's own η, Nesterov's chosen so that momentum carries a delta no further
than FedAvg's default step does; a global_lr that is set is used as it is."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig
from ps_server.aggregation.outer import build_outer_optimizer


def _carried(agg: AggregationConfig, delta: np.ndarray, steps: int = 400) -> np.ndarray:
    """How far the outer optimizer moves the model for one delta followed by `steps` empty rounds."""
    outer = build_outer_optimizer(agg, delta.size)
    moved = np.zeros_like(delta, dtype=np.float64)
    for t in range(steps + 1):
        update = (delta if t == 0 else np.zeros_like(delta)).copy()
        outer.increment_(update)
        moved += update
    return moved


@pytest.mark.parametrize("momentum", [0.9, 0.5, 0.99])
def test_unset_nesterov_carries_a_delta_as_far_as_fedavgs_default_step(momentum):
    delta = np.random.default_rng(0).normal(size=64).astype(np.float32)
    nesterov = AggregationConfig(outer_optimizer="nesterov", momentum=momentum)
    fedavg = AggregationConfig(outer_optimizer="fedavg")
    # FedAvg's default moves the model by 0.5 × the delta, once; Nesterov spreads the same total over the rounds
    # after it (0.99**2000 is far below float32's resolution of the sum).
    np.testing.assert_allclose(_carried(fedavg, delta, 0), 0.5 * delta, rtol=1e-6)
    np.testing.assert_allclose(_carried(nesterov, delta, 2000), 0.5 * delta, rtol=1e-4)
    assert nesterov.outer_lr == pytest.approx(0.5 * (1 - momentum))


def test_the_defaults_and_a_set_global_lr():
    assert AggregationConfig().outer_lr == 0.5  # FedAvg, the default outer optimizer, mixing async deltas
    assert AggregationConfig(mode="sync").outer_lr == 1.0  # a sync round's update is already the sites' mean
    assert AggregationConfig(mode="auto").outer_lr == 0.5  # the PS reads the live mode's (test_auto_mode_unit)
    assert AggregationConfig(mode="sync", outer_optimizer="nesterov").outer_lr == pytest.approx(0.05)
    assert AggregationConfig(outer_optimizer="adam").outer_lr == 0.01
    assert AggregationConfig(outer_optimizer="nesterov").outer_lr == pytest.approx(0.05)
    assert AggregationConfig(outer_optimizer="nesterov", global_lr=0.7).outer_lr == 0.7  # DiLoCo's, as given
    fed = FederationConfig.model_validate({"aggregation": {"outer_optimizer": "nesterov", "global_lr": 0.7}})
    assert fed.aggregation.outer_lr == 0.7
    # Unset stays unset when the settings travel (Join, the PS's config file): the optimizer picks it again.
    again = FederationConfig.model_validate(FederationConfig().model_dump())
    assert again.aggregation.global_lr is None
    with pytest.raises(ValueError, match="greater than 0"):
        AggregationConfig(global_lr=0)
