"""autotune settings: defaults off for the tuners that change behaviour, bad values refused clearly."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from geofed.config import FederationConfig


def test_defaults_leave_behaviour_as_configured():
    a = FederationConfig().autotune
    assert not a.interval and not a.straggler_timeout
    assert a.sync_below < a.async_above


@pytest.mark.parametrize(("autotune", "message"), [
    ({"comm_fraction": 1.0}, "comm_fraction\n  Input should be less than 1"),
    ({"comm_fraction": 0.0}, "comm_fraction\n  Input should be greater than 0"),
    ({"straggler_margin": 0.5}, "straggler_margin\n  Input should be greater than or equal to 1"),
    ({"straggler_quantile": 0.0}, "straggler_quantile\n  Input should be greater than 0"),
    ({"round_window": 0}, "round_window\n  Input should be greater than or equal to 1"),
    ({"interval_min_s": 60, "interval_max_s": 30}, "interval_min_s (60) must not exceed interval_max_s (30)"),
    ({"straggler_min_s": 60, "straggler_max_s": 30}, "straggler_min_s (60) must not exceed straggler_max_s (30)"),
    ({"sync_below": 2.0, "async_above": 2.0}, "sync_below (2) must be below async_above (2)"),
    ({"async_above": 1.0}, "async_above\n  Input should be greater than 1"),
])
def test_out_of_range_values_are_refused_with_a_clear_message(autotune, message):
    with pytest.raises(ValidationError) as err:
        FederationConfig.model_validate({"autotune": autotune})
    assert message in str(err.value)
