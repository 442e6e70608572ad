"""The "ours + autotune" federation-benchmark method: geofed's defaults with every live-measured setting on."""

from __future__ import annotations

import pytest

from bench.federation.methods import METHODS, federation_for, get_method
from bench.federation.scenario import load_scenario
from bench.federation.scenarios import BUILTIN


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_ours_autotune_is_ours_with_the_tuners_on(name):
    scenario = load_scenario(name)
    tuned = federation_for(scenario, get_method("ours-autotune"))
    ours = federation_for(scenario, METHODS["ours"])
    assert (tuned.codec.name, tuned.aggregation.mode, tuned.autotune.interval, tuned.autotune.straggler_timeout) \
        == ("auto", "auto", True, True)
    # Everything else is ours' (the defaults): only those four settings differ.
    a, b = tuned.model_dump(), ours.model_dump()
    changed = {f"{section}.{key}" for section in a if isinstance(a[section], dict)
               for key in a[section] if a[section][key] != b[section].get(key)}
    assert changed == {"codec.name", "aggregation.mode", "autotune.interval", "autotune.straggler_timeout"}
    assert get_method("ours-autotune").label == "ours + autotune"


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_ours_defaults_runs_geofeds_default_codec_and_mode(name):
    # "ours (defaults)" must be what a user gets: the harness fixed int8 while geofed shipped codec auto until
    # 2026-12-01, and the row's label said "auto codec" over int8 runs.
    from geofed.config import AggregationConfig, CodecConfig

    ours = federation_for(load_scenario(name), METHODS["ours"])
    assert ours.codec.name == CodecConfig().name == "int8"
    assert ours.aggregation.mode == AggregationConfig().mode
    assert "int8 codec" in METHODS["ours"].summary and "the harness's" not in METHODS["ours"].summary
