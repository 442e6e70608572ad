"""Scoring a fine-tuned model on the shared held-out pairs and on each client's own held-out pairs."""

from __future__ import annotations

import torch

from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.finetune.answers import evaluate_answers
from geofed_apps.finetune.preset import FinetuneTask, summary_lines
from geofed_apps.finetune.task import QAPair, QASplit, write_split

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 128}
SHARED = (QAPair("# load: Read *fp* as JSON.", "fp"), QAPair("# wait: Block for timeout seconds.", "timeout"))
OWN = (
    (QAPair("# put: Put item in the queue.", "item"), QAPair("# get: Take from the queue.", "block")),
    (QAPair("# send: Send data on sock.", "data sock"),),
)


def _task(tmp_path) -> FinetuneTask:
    train = ((QAPair("# a: Use x.", "x"),), (QAPair("# b: Use y.", "y"),))
    files, held, own = write_split(QASplit(clients=train, eval=SHARED, own_eval=OWN), tmp_path)
    return FinetuneTask(files, held, own)


def _models() -> list[torch.nn.Module]:
    fed = FederationConfig.model_validate({"model": TINY})
    out = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        out.append(build_model(fed.model))
    return out


def test_each_clients_model_is_scored_on_its_own_pairs_and_the_shared_ones_and_averaged(tmp_path):
    task = _task(tmp_path)
    models = _models()

    got = task.score(lambda i: models[i], one_model=False)

    shared = [evaluate_answers(m, list(SHARED)) for m in models]
    own = [evaluate_answers(models[i], list(OWN[i])) for i in range(2)]
    assert got.own.f1 == (own[0].f1 + own[1].f1) / 2
    assert got.own.eval_loss == (own[0].eval_loss + own[1].eval_loss) / 2
    assert got.shared.eval_loss == (shared[0].eval_loss + shared[1].eval_loss) / 2
    assert own[0].eval_loss != own[1].eval_loss  # two models, two different scores: the mean is not one of them


def test_one_model_for_every_client_is_scored_once_on_the_shared_pairs_and_on_each_clients_own(tmp_path):
    task = _task(tmp_path)
    model = _models()[0]
    calls = []

    def model_of_client(i: int) -> torch.nn.Module:
        calls.append(i)
        return model

    got = task.score(model_of_client, one_model=True)

    assert calls == [0, 1]
    assert got.shared.eval_loss == evaluate_answers(model, list(SHARED)).eval_loss
    own = [evaluate_answers(model, list(pairs)) for pairs in OWN]
    assert got.own.eval_loss == (own[0].eval_loss + own[1].eval_loss) / 2
    fed = FederationConfig.model_validate({"model": TINY})
    assert summary_lines(got, got, fed)[-1] == f"own-domain F1: {got.own.f1:.1f} -> {got.own.f1:.1f}"
