"""`geofed local --paradigm dpo --data`: the user's preference records are read and checked before anything
starts (one line naming file:line, no run directory), then trained on and scored on the held-out ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from client_agent.paradigms.dpo import read_preferences
from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.finetune.base_model import BaseRecipe, store

GEOFED = str(Path(sys.executable).with_name("geofed"))
TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 128}
GOOD = b'{"prompt": "p", "chosen": "a", "rejected": "b"}\n'


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A fine-tuning cache whose base model (a tiny seeded GPT-2) stands in for the pretrained one."""
    cache = tmp_path_factory.mktemp("cache")
    store(build_model(FederationConfig.model_validate({"model": TINY}).model), BaseRecipe(), cache)
    return cache


def _local(cache: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([GEOFED, "local", "--paradigm", "dpo", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "GEOFED_CACHE": str(cache)})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (GOOD + b'{"prompt": "p", "chosen": "a"}\n', r"prefs.jsonl:2: a preference record has no 'rejected' field"),
        (GOOD + b"\n" + b'{"prompt": "p", "chosen": "a", "rejected": "a"}\n',
         r"prefs.jsonl:3: 'chosen' and 'rejected' are the same completion"),
        (GOOD + b'{"prompt": "p", "chosen": \n', r"prefs.jsonl:2: not a JSON line"),
        (b"\n", r"prefs.jsonl: holds no preference record"),
        (GOOD + b'{"prompt": "p", "chosen": "' + b"c" * 200 + b'", "rejected": "b"}\n',
         r"prefs.jsonl:2: a completion of 201 tokens cannot fit model.block_size 128"),
    ],
)
def test_unusable_preference_data_stops_the_launcher_before_anything_starts(tmp_path, cache, content, message):
    data = tmp_path / "data"
    data.mkdir()
    (data / "prefs.jsonl").write_bytes(content)
    runs = tmp_path / "runs"

    out = _local(cache, "--data", str(data), "--run-dir", str(runs), timeout=180)

    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("geofed local: ") and re.search(message, last), out.stderr
    assert not runs.exists()  # no run directory, so no PS, client or log was started


def test_dpo_trains_on_the_users_preference_records_and_scores_the_held_out_ones(tmp_path, cache):
    # Prepare: 40 records without `completion` (the user's format); 10 held out by --eval-data
    words = [f"w{i:02d}" for i in range(50)]
    (tmp_path / "train").mkdir()
    (tmp_path / "held").mkdir()
    for folder, lo, hi in (("train", 0, 40), ("held", 40, 50)):
        records = [{"prompt": f"# f: takes {w}\n# parameters: ", "chosen": f"{w}\n", "rejected": "self\n"}
                   for w in words[lo:hi]]
        (tmp_path / folder / "prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    # Execute
    out = _local(cache, "--data", str(tmp_path / "train"), "--eval-data", str(tmp_path / "held"), "--clients", "2",
                 "--duration", "120", "--run-dir", str(tmp_path / "runs"), "--quiet",
                 "--set", "training.max_steps=4", "--set", "paradigm.rank=4")

    # Assert
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"^held out: 10 pairs from .*held \(--eval-data\); 40 pairs trained on by 2 clients$",
                     out.stdout, re.M)
    assert re.search(r"^preference accuracy: [0-9.]+% -> [0-9.]+%$", out.stdout, re.M)
    assert "F1" not in out.stdout  # the docstring task's score: not this run's
    run = Path(out.stdout.strip().splitlines()[-1].removeprefix("run directory: "))
    written = [read_preferences(run / "data" / f"client-{i}.jsonl") for i in range(2)]
    assert sorted(p.chosen for prefs in written for p in prefs) == [f"{w}\n" for w in words[:40]]
