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
