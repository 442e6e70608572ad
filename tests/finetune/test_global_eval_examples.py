"""The global evaluator `geofed local` reports scores prompt/completion held-out files on their completions."""

from __future__ import annotations

import torch

from client_agent.data.batch import MaskedBatch
from client_agent.training.model import build_model, lm_loss
from geofed.config import FederationConfig
from geofed_apps.evaluate import EVAL_BATCHES, GlobalEvaluator
from geofed_apps.finetune.task import QAPair, write_pairs


def test_the_global_evaluator_takes_the_mean_completion_loss_of_prompt_completion_files(tmp_path):
    fed = FederationConfig.model_validate({"model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 64}})
    pairs = [QAPair(f"# f{i}: Open *path{i}* in mode.", f"path{i}") for i in range(12)]
    held = write_pairs(tmp_path / "eval.jsonl", pairs)

    evaluator = GlobalEvaluator(fed, [held], tmp_path / "eval-tokens.npy")

    assert len(evaluator.batches) == EVAL_BATCHES and all(isinstance(b, MaskedBatch) for b in evaluator.batches)
    for batch in evaluator.batches:  # the counted targets of each row: its answer, the newline, EOS
        for row, mask in zip(batch.tokens, batch.mask, strict=True):
            counted = row[1:][mask].tolist()
            prompt = bytes(row[: int(mask.int().argmax()) + 1].tolist()).decode()
            number = prompt.split(":")[0].removeprefix("# f")
            assert counted == [*f"path{number}\n".encode(), 256], (prompt, counted)
    model = build_model(fed.model).eval()  # Θ0: what the evaluator scores without a published vector
    with torch.no_grad():
        expected = sum(float(lm_loss(model, b)) for b in evaluator.batches) / len(evaluator.batches)
    assert evaluator.loss() == expected
