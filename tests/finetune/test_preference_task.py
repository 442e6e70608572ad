"""The built-in preference task's answers: the held-out pairs the LoRA preset scores, their F1 scored as the
LoRA preset scores it, and the `F1: A -> B` line beside the preference accuracy."""

from __future__ import annotations

import pytest

from client_agent.paradigms.dpo import read_preferences
from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.finetune.answers import evaluate_answers
from geofed_apps.finetune.base_model import ensure_base_model
from geofed_apps.finetune.preference import PreferenceScores, PreferenceTask
from geofed_apps.finetune.preset import FinetuneTask, preset_settings, with_base_targets


def test_the_built_in_task_keeps_the_held_out_pairs_the_lora_preset_scores(tmp_path):
    # Execute
    task = PreferenceTask.write(tmp_path / "dpo", 2, seed=3)
    lora = FinetuneTask.write(tmp_path / "lora", 2, seed=3)

    # Assert: the same pairs as the LoRA preset's eval file, in the order of the preference records
    assert [(p.prompt, p.answer) for p in task.answers] == [(p.prompt, p.answer) for p in lora.pairs]
    assert [(p.prompt, p.chosen) for p in read_preferences(task.eval_file)] == [
        (p.prompt, p.completion) for p in lora.pairs]


@pytest.mark.parametrize(
    ("before", "after", "f1_line"),
    [
        (PreferenceScores(55.0, 0.0, 1.5), PreferenceScores(60.25, 0.3, 12.25), "F1: 1.5 -> 12.2"),
        (PreferenceScores(55.0, 0.0), PreferenceScores(60.25, 0.3), None),  # the user's records: no answers
    ],
)
def test_the_summary_puts_f1_beside_the_preference_accuracy(tmp_path, before, after, f1_line):
    task = PreferenceTask([], tmp_path / "eval.jsonl")

    lines = task.summary_lines(before, after)

    assert lines[:2] == ["reward margin: 0.000 -> 0.300", "preference accuracy: 55.0% -> 60.2%"]
    assert lines[2:] == ([f1_line] if f1_line else [])


@pytest.mark.slow
def test_the_base_s_f1_is_the_lora_preset_s_on_the_built_in_base(tmp_path):
    # Prepare: the built-in base (cached; pretrained on first use) under the dpo preset
    base = ensure_base_model(say=lambda _: None)
    fed = FederationConfig.model_validate(with_base_targets(preset_settings("dpo", base), str(base)))
    task = PreferenceTask.write(tmp_path / "dpo", 2, seed=0)

    # Execute
    scores = task.score_base(fed)

    # Assert: the LoRA preset's scoring of the plain base on its own eval file
    reference = evaluate_answers(build_model(fed.model), FinetuneTask.write(tmp_path / "lora", 2, seed=0).pairs)
    assert scores.f1 == pytest.approx(reference.f1) and reference.f1 > 0
    assert scores.margin == 0.0
