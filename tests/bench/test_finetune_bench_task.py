"""finetune_bench on the stdlib-package task: its summary is read with the stated interval, central rows refused."""

from __future__ import annotations

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


def test_a_task_with_a_central_row_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        finetune_bench.main(["--task", "stdlib-package", "--rows", "lora,central-lora", "--runs", "1"])

    assert "--task stdlib-package runs federated rows only" in capsys.readouterr().err
