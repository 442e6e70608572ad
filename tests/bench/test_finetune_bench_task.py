"""finetune_bench on the stdlib-package task: its summary is read with its interval, its rules scored per seed."""

from __future__ import annotations

import argparse

import pytest

from bench import finetune_bench

TASK_RUN = """exact match: 0.0 -> 31.5
F1: 0.0 -> 31.5
eval loss: 4.10 -> 1.20
95% interval on 1200 held-out pairs: exact match 28.9-34.2, F1 28.9-34.2
run directory: /tmp/x
"""


def test_a_task_runs_summary_keeps_its_interval_and_has_no_own_domain_score():
    summary = finetune_bench._summary(TASK_RUN)

    assert summary["f1"] == [0.0, 31.5] and summary["eval_loss"] == [4.10, 1.20]
    assert summary["interval"].startswith("95% interval on 1200 held-out pairs")
    assert "own_f1" not in summary and "base_sha256" not in summary


def test_a_task_without_its_own_results_folder_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        finetune_bench.main(["--task", "stdlib-package", "--rows", "lora,central-lora", "--runs", "1"])

    assert "--task stdlib-package brings its own pairs (no --renamings) and needs its own --out" in (
        capsys.readouterr().err
    )


def test_the_task_rule_row_scores_each_seeds_held_out_pairs_and_keeps_their_median():
    found = finetune_bench.run_rules(argparse.Namespace(task="stdlib-package", runs=3))

    assert found["eval_pairs"] == 1200 and found["seeds"] == [0, 1, 2]
    for name, rule in found["rules"].items():
        per_seed = rule["per_seed"]
        assert len(per_seed) == 3 and len(set(per_seed)) > 1, name  # each seed holds out other pairs
        assert rule["em"] == rule["f1"] == sorted(per_seed)[1]
    # a word vote knows far more than the most frequent package
    assert found["rules"]["word-vote"]["f1"] > found["rules"]["most-frequent-label"]["f1"] + 20
