"""The client logs each change of its 'auto' codec choice with the reason (issue 14)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from client_agent.agent import ClientAgent
from geofed.config import ClientConfig, FederationConfig


def test_each_change_of_the_auto_codec_is_logged_once_with_its_reason(tmp_path, caplog):
    # Prepare
    agent = ClientAgent(ClientConfig(client_id="t.auto", data=str(tmp_path), work_dir=str(tmp_path / "w")))
    fed = FederationConfig.model_validate({"codec": {"name": "auto", "sync_time_budget_s": 10.0}})
    ps = SimpleNamespace(link_bytes_per_s=None)
    chosen = []

    # Execute: no rate yet, a slow link twice, then a fast one
    with caplog.at_level(logging.INFO, logger="geofed.client"):
        for rate in (None, 1e5, 1e5, 1e8):
            ps.link_bytes_per_s = rate
            chosen.append(agent._codec_name(fed, ps, 1_000_000))

    # Assert
    assert chosen == ["int8", "int8", "int8", "int16"]
    lines = [r.getMessage() for r in caplog.records if "event=autotune" in r.getMessage()]
    assert len(lines) == 2  # int8 (no rate) and the switch to int16; the unchanged choices are not repeated
    assert "value=int8" in lines[0] and "no upload timed yet" in lines[0]
    assert "value=int16" in lines[1] and "within sync_time_budget_s=10" in lines[1]
