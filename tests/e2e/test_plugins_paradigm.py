"""A paradigm geofed does not ship, declared in test-support files only (tests/plugins/biases*.py: its
settings, client half and PS strategy, no list edited), trains a real `geofed local` federation:
`GEOFED_PLUGINS` names its settings module, and every process finds the halves from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from geofed_testing.local_run import run_local
from ps_server.checkpoint import CheckpointStore

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "tests.plugins.biases"


def _with_plugin(monkeypatch) -> None:
    monkeypatch.setenv("GEOFED_PLUGINS", PLUGIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_a_geofed_command_knows_a_plugin_paradigm_its_halves_and_its_preset(monkeypatch):
    # Prepare
    _with_plugin(monkeypatch)
    script = ("import geofed_apps\n"
              "from geofed.config import FederationConfig\n"
              "from client_agent.paradigms import client_paradigm\n"
              "from ps_server.aggregation.strategies import build_strategy\n"
              "from geofed_apps.finetune.preset import preset_settings\n"
              "fed = FederationConfig(paradigm='biases', ps_shards=2)\n"
              "print(type(client_paradigm(fed.paradigm)).__module__, type(build_strategy(fed)).__module__)\n"
              "print(preset_settings('biases', 'base')['paradigm'])\n")

    # Execute
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)

    # Assert
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["tests.plugins.biases_client tests.plugins.biases_ps", "{'name': 'biases'}"]


@pytest.mark.long
def test_a_paradigm_from_test_modules_trains_a_federation(tmp_path, monkeypatch):
    # Prepare
    _with_plugin(monkeypatch)

    # Execute
    out = run_local(tmp_path, "--clients", "2", "--duration", "30", "--set", "paradigm.name=biases")

    # Assert
    assert out.first_loss is not None and out.last_loss < out.first_loss - 0.3, out.stdout[-2000:]
    records = [json.loads(line) for line in (out.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("codec" in r for r in records), records[:3]  # the clients' pushes
    ckpt = CheckpointStore(out.run_dir / "ps").load_latest()
    assert ckpt.version >= 3, ckpt.version  # the PS applied pushes round after round
    names = [t.name for t in ckpt.manifest]
    assert names and all(n.endswith(".bias") for n in names), names  # it holds the biases, nothing else
    # Every bias starts at zero (`client_agent.training.gpt2`); the published ones moved.
    assert np.abs(ckpt.flat).max() > 0
