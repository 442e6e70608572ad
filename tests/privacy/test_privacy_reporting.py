"""ε where the operator reads it: `geofed status`'s privacy line, the Federation's status.privacy, the metric."""

from __future__ import annotations

import datetime as dt

from geofed_operator.federation_status import federation_status_from_ps
from ps_server.metrics import PSMetrics
from ps_server.status_table import format_status

PRIVACY = {
    "privacy_mode": "central",
    "privacy_epsilon": 3.14159,
    "privacy_delta": 1e-5,
    "privacy_budget": 8.0,
    "privacy_versions": 12,
    "privacy_spent": False,
    "privacy_clip_norm": 0.5,
    "privacy_noise_multiplier": 1.1,
}
PS = {"federation": "demo", "version": 13, "mode": "sync", "has_model": True, "server_instance": "abc", **PRIVACY}


def test_geofed_status_prints_epsilon_its_budget_and_delta():
    lines = format_status(PS, []).splitlines()
    assert lines[1] == "privacy central  ε 3.142 / 8 at δ 1e-05 after 12 versions  σ 1.1  C 0.5"
    spent = format_status({**PS, "privacy_spent": True}, []).splitlines()[1]
    assert spent.endswith("(budget spent: no further version is published)")
    assert not any(line.startswith("privacy") for line in format_status({**PS, "privacy_mode": ""}, []).splitlines())


def test_the_federation_status_carries_the_accountant():
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    st = federation_status_from_ps(PS, now=now, generation=1, conditions=None)
    assert st["privacy"] == {
        "mode": "central",
        "epsilon": 3.14159,
        "delta": 1e-5,
        "budget": 8.0,
        "versions": 12,
        "spent": False,
        "clipNorm": 0.5,
        "noiseMultiplier": 1.1,
    }
    off = federation_status_from_ps({**PS, "privacy_mode": ""}, now=now, generation=1, conditions=None)
    assert "privacy" not in off


def test_the_metrics_export_epsilon_and_its_budget():
    m = PSMetrics()
    m.set_privacy(PRIVACY)
    assert m.registry.get_sample_value("geofed_privacy_epsilon") == 3.14159
    assert m.registry.get_sample_value("geofed_privacy_epsilon_budget") == 8.0
    assert m.registry.get_sample_value("geofed_privacy_delta") == 1e-5
