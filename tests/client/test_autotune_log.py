"""The client logs each change of its 'auto' codec choice with the reason."""

from __future__ import annotations

import logging

from client_agent.connection.link_tuner import LinkMeter, LinkTuner
from geofed.config import FederationConfig


def test_each_change_of_the_auto_codec_is_logged_once_with_its_reason(caplog):
    # Prepare
    fed = FederationConfig.model_validate({"codec": {"name": "auto", "sync_time_budget_s": 10.0}})
    meter = LinkMeter()
    tuner = LinkTuner(fed, meter, 1_000_000, "t.auto")
    chosen = []

    # Execute: no rate yet, a slow link twice, then a fast one
    with caplog.at_level(logging.INFO, logger="geofed.client"):
        for rate in (None, 1e5, 1e5, 1e8):
            meter.up_bytes_per_s = rate
            chosen.append(tuner.codec_name())

    # Assert
    assert chosen == ["int8", "int8", "int8", "int16"]
    lines = [r.getMessage() for r in caplog.records if "event=autotune" in r.getMessage()]
    assert len(lines) == 2  # int8 (no rate) and the switch to int16; the unchanged choices are not repeated
    assert "value=int8" in lines[0] and "no upload timed yet" in lines[0]
    assert "value=int16" in lines[1] and "within sync_time_budget_s=10" in lines[1]


def test_a_fixed_codec_is_chosen_every_round_and_never_logged_as_tuned(caplog):
    fed = FederationConfig.model_validate({"codec": {"name": "int16"}})
    meter = LinkMeter()
    tuner = LinkTuner(fed, meter, 1_000_000, "t.fixed")
    with caplog.at_level(logging.INFO, logger="geofed.client"):
        for rate in (None, 1e3, 1e9):
            meter.up_bytes_per_s = rate
            assert tuner.codec_name() == "int16"
    assert not [r for r in caplog.records if "event=autotune" in r.getMessage()]
