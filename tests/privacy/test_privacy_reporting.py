"""ε where the operator reads it: `geofed status`'s privacy line, the Federation's status.privacy, the metric, the
status page and the wire message."""

from __future__ import annotations

import datetime as dt

import numpy as np

from geofed.config import FederationConfig, ServerConfig
from geofed.protocol import geofed_pb2 as pb
from geofed_operator.federation_status import federation_status_from_ps
from ps_server.core import ParameterServerCore
from ps_server.global_model import TensorEntry
from ps_server.metrics import PSMetrics
from ps_server.status_page.history import LossHistory
from ps_server.status_page.view import build_view
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


def test_the_ps_core_reports_privacy_through_the_wire_message_and_the_status_page(tmp_path):
    fed = FederationConfig.model_validate(
        {"aggregation": {"weighting": "uniform"}, "privacy": {"enabled": True, "noise_multiplier": 1.5, "delta": 1e-6}}
    )
    core = ParameterServerCore(fed, ServerConfig(checkpoint_dir=str(tmp_path)), admin_credential="x" * 32)
    core.aggregator.restore(1, np.zeros(8, np.float32), (TensorEntry("w", (8,), "float32"),), {})
    wire = pb.StatusResponse(**core.status())  # every key must be a StatusResponse field
    assert (wire.privacy_mode, wire.privacy_delta, wire.privacy_noise_multiplier) == ("central", 1e-6, 1.5)
    assert wire.privacy_versions == 0 and wire.privacy_epsilon == 0.0 and not wire.privacy_spent
    view = build_view(core, LossHistory(), None)
    assert view["privacy"]["mode"] == "central" and view["privacy"]["delta"] == 1e-6
