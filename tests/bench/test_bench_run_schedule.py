"""The run-cosine methods: the federated clients decay over the scenario's seconds, the single process over
its token budget, with the same schedule settings."""

from __future__ import annotations

import json

import pytest
import yaml

from bench.federation.methods import federation_for, get_method
from bench.federation.scenario import load_scenario
from bench.federation.single import train_single
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig


@pytest.mark.parametrize("scenario", ["local3", "hetero-wan"])
def test_run_cosine_decays_over_the_scenarios_budget_and_the_single_process_uses_the_same_schedule(scenario):
    s = load_scenario(scenario)

    fed = federation_for(s, get_method("ours-run-cosine")).training
    single = federation_for(s, get_method("single-run-cosine")).training
    today = federation_for(s, get_method("ours")).training

    assert (fed.lr_schedule, fed.lr_progress, fed.run_duration_s) == ("cosine", "run_time", float(s.budget_s))
    assert single == fed
    assert today.model_dump() == fed.model_copy(update={
        "lr_schedule": today.lr_schedule, "lr_progress": today.lr_progress, "run_duration_s": today.run_duration_s,
    }).model_dump()  # the one difference from today's defaults is the schedule


def test_the_single_process_follows_the_fraction_of_its_token_budget_trained(tmp_path, monkeypatch):
    # Prepare: a tiny model and corpus, a run-time schedule, 10 steps of 2 × 16 tokens
    text = tmp_path / "a.txt"
    text.write_text("def f(x):\n    return x + 1\n" * 400, encoding="utf-8")
    data_list = tmp_path / "a.list"
    data_list.write_text(f"{text}\n", encoding="utf-8")
    settings = {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
        "training": {"batch_size": 2, "lr": 1e-3, "warmup_steps": 0, "lr_min_ratio": 0.0, "precision": "fp32",
                     "micro_batch_size": 2, "lr_schedule": "cosine", "lr_progress": "run_time",
                     "run_duration_s": 100.0},
    }
    fed_file = tmp_path / "federation.yaml"
    fed_file.write_text(yaml.safe_dump(FederationConfig.model_validate(settings).model_dump(mode="json")))
    seen: list[tuple[int, float, float]] = []
    real_train = LocalTrainer.train

    def train(self, max_steps, deadline=None):
        seen.append((self.step, self.run_progress(), self.progress()))
        return real_train(self, max_steps, deadline)

    monkeypatch.setattr(LocalTrainer, "train", train)

    # Execute
    train_single(fed_file, [data_list], [text], 10 * 2 * 16, 5, tmp_path / "curve.jsonl", tmp_path)

    # Assert: before each chunk of 2 steps, progress = tokens trained / token budget
    assert [(step, p) for step, p, _ in seen] == [(0, 0.0), (2, 0.2), (4, 0.4), (6, 0.6), (8, 0.8)]
    curve = [json.loads(line) for line in (tmp_path / "curve.jsonl").read_text().splitlines()]
    assert curve[-1]["tokens"] == 10 * 2 * 16
