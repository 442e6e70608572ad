"""`geofed local --paradigm dpo`: the docstring task as preference pairs, federated, on the built-in base.

The base is the one `geofed local` fine-tunes (`base_model.ensure_base_model`: cached, pretrained on first
use), not a random stand-in: a randomly initialised model has no notion of which of two answers its
docstring names, so its held-out preference accuracy has nothing to rise from.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from client_agent.paradigms.dpo import read_preferences
from geofed.config import FederationConfig
from geofed_apps.finetune.base_model import ensure_base_model

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.long
def test_geofed_local_dpo_raises_the_held_out_preference_accuracy(tmp_path):
    base = ensure_base_model(say=lambda _: None)

    out = subprocess.run(
        [GEOFED, "local", "--paradigm", "dpo", "--clients", "2", "--duration", "120", "--run-dir", str(tmp_path),
         "--quiet", "--set", "training.max_steps=200"],
        capture_output=True, text=True, timeout=600,
    )

    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    accuracy = re.search(r"^preference accuracy: ([0-9.]+)% -> ([0-9.]+)%$", out.stdout, re.M)
    margin = re.search(r"^reward margin: (-?[0-9.]+) -> (-?[0-9.]+)$", out.stdout, re.M)
    f1 = re.search(r"^preference accuracy: .*\nF1: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.M)  # beside it
    assert accuracy and margin and f1 and lines[-1].startswith("run directory: ")
    assert float(accuracy.group(2)) > float(accuracy.group(1))
    assert float(margin.group(1)) == 0.0 and float(margin.group(2)) > 0  # the base is its own reference
    run = Path(lines[-1].removeprefix("run directory: "))
    fed = FederationConfig.model_validate(yaml.safe_load((run / "federation.yaml").read_text()))
    assert fed.paradigm.name == "dpo" and fed.paradigm.beta == 0.1 and fed.model.path == str(base)
    held = read_preferences(run / "data" / "eval.jsonl")  # valid preference records: chosen != rejected
    assert len(held) > 50
