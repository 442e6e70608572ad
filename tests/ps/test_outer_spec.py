"""An outer optimizer is one `OuterSpec` (its facts) and one PS class naming it: the heavy-ball optimizer in
tests/plugins/ is found by the settings' η and momentum and by the PS's builder with no edit elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import AggregationConfig
from geofed.outer_optimizers import OUTER_SPECS, OuterSpec, outer_spec
from ps_server.aggregation.outer import OUTER_OPTIMIZERS, build_outer_optimizer, restore_outer
from tests.plugins.heavy_ball import HEAVY_BALL
from tests.plugins.heavy_ball_ps import HeavyBall


def _settings(**values: object) -> AggregationConfig:
    """Aggregation settings naming a plug-in declared after `geofed.config` was imported (no validation)."""
    defaults = AggregationConfig().model_dump()
    return AggregationConfig.model_construct(**{**defaults, **values})


def test_the_settings_and_the_ps_read_a_declared_outer_optimizer():
    agg = _settings(outer_optimizer="heavy_ball", momentum=0.5)
    assert agg.outer_lr == pytest.approx(0.25) and agg.outer_momentum and not agg.deltas_agree
    assert not _settings(outer_optimizer="heavy_ball", momentum=0.0).outer_momentum
    outer = build_outer_optimizer(agg, 4)
    assert isinstance(outer, HeavyBall) and outer.name == "heavy_ball" and OUTER_OPTIMIZERS["heavy_ball"] is HeavyBall
    outer.increment_(np.ones(4, dtype=np.float32))
    delta = np.ones(4, dtype=np.float32)
    outer.increment_(delta)
    np.testing.assert_allclose(delta, 0.25 * 1.5)  # buf = 0.5 * 1 + 1
    fresh = build_outer_optimizer(agg, 4)
    assert restore_outer(fresh, outer.state_dict()) is None and np.array_equal(fresh.buf, outer.buf)


def test_a_name_is_declared_once_and_an_unknown_one_lists_the_known():
    with pytest.raises(ValueError, match="declared twice"):
        OuterSpec("heavy_ball", lr=lambda cfg: 1.0)
    assert OUTER_SPECS["heavy_ball"] is HEAVY_BALL
    with pytest.raises(ValueError, match="unknown outer optimizer 'lion'; known: fedavg, nesterov, adam"):
        outer_spec("lion")
