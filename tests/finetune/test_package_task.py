"""The stdlib-package task: enough held-out pairs to decide, disjoint from training, with its rule baselines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.finetune.base_model import BaseRecipe, store
from geofed_apps.finetune.package_task import EVAL_PAIRS, LABELS, package_pairs, rule_scores, write_package_task

GEOFED = str(Path(sys.executable).with_name("geofed"))
TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 128}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    train, held = write_package_task(tmp_path_factory.mktemp("task"), seed=0)
    read = [[json.loads(line) for line in (d / "pairs.jsonl").read_text().splitlines()] for d in (train, held)]
    return read[0], read[1]


def test_the_held_out_set_is_large_and_disjoint_from_training(written):
    train, held = written

    assert len(held) == EVAL_PAIRS >= 1000 and len(train) >= 1000
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held}
    assert {p["completion"].strip() for p in train + held} <= set(LABELS)
    assert max(len((p["prompt"] + p["completion"] + "\n").encode()) for p in train + held) <= 128  # base's context


def test_the_best_rules_leave_headroom(written):
    pairs = package_pairs()
    train = [(p["prompt"], p["completion"].strip()) for p in written[0]]
    held = [(p["prompt"], p["completion"].strip()) for p in written[1]]
    scores = rule_scores(train, held)

    assert len(pairs) == len(train) + len(held)
    assert scores["most-frequent-label"] < scores["word-vote"] < 90.0


def test_a_task_without_paradigm_is_refused_before_anything_starts(tmp_path):
    out = subprocess.run([GEOFED, "local", "--task", "stdlib-package", "--run-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)

    assert out.returncode != 0 and "--task stdlib-package needs --paradigm" in out.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.long
def test_geofed_local_fine_tunes_on_the_package_task_and_states_the_interval(tmp_path):
    cache = tmp_path / "cache"
    store(build_model(FederationConfig.model_validate({"model": TINY}).model), BaseRecipe(), cache)

    out = subprocess.run(
        [GEOFED, "local", "--paradigm", "lora", "--task", "stdlib-package", "--clients", "2", "--duration", "120",
         "--run-dir", str(tmp_path / "runs"), "--quiet", "--set", "training.max_steps=8", "--set", "paradigm.rank=4"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "GEOFED_CACHE": str(cache)},
    )

    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    interval = re.search(r"^95% interval on (\d+) held-out pairs: exact match ([0-9.]+)-([0-9.]+), "
                         r"F1 ([0-9.]+)-([0-9.]+)$", out.stdout, re.M)
    assert interval and int(interval[1]) == EVAL_PAIRS
    assert float(interval[2]) <= float(interval[3]) and float(interval[4]) <= float(interval[5])
    assert (cache / "tasks" / "stdlib-package" / "seed-0" / "eval" / "pairs.jsonl").exists()
