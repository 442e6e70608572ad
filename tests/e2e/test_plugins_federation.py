"""A codec and an outer optimizer that geofed does not ship, declared in test-support files only
(tests/plugins/), train a real `geofed local` federation: `GEOFED_PLUGINS` names their modules, and every
process the launcher starts knows them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from geofed_testing.local_run import run_local
from ps_server.checkpoint import CheckpointStore

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = "tests.plugins.fp16_codec,tests.plugins.heavy_ball,tests.plugins.heavy_ball_ps"


@pytest.mark.long
def test_a_codec_and_an_outer_optimizer_from_test_modules_train_a_federation(tmp_path, monkeypatch):
    # Prepare
    monkeypatch.setenv("GEOFED_PLUGINS", PLUGINS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    # Execute
    out = run_local(tmp_path, "--clients", "2", "--duration", "30", "--set", "codec.name=fp16",
                    "--set", "aggregation.outer_optimizer=heavy_ball", "--set", "aggregation.momentum=0.5")

    # Assert
    assert out.first_loss is not None and out.last_loss < out.first_loss - 0.5, out.stdout[-2000:]
    records = [json.loads(line) for line in (out.run_dir / "metrics.jsonl").read_text().splitlines()]
    pushes = [r for r in records if "codec" in r]
    assert pushes and all(r["codec"] == "fp16" for r in pushes), records[:3]
    ckpt = CheckpointStore(out.run_dir / "ps").load_latest()
    outer = ckpt.aggregator["strategy"]["outer"]  # the PS stepped with the plug-in's class, momentum and all
    assert ckpt.version >= 3 and outer["name"] == "heavy_ball" and np.abs(outer["buf"]).max() > 0
