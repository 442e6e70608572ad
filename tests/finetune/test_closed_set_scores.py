"""Closed-set accuracy: a classification task is also scored by which of its labels the model finds likeliest."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from client_agent.data.files import Fit
from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.finetune.answers import closed_set_accuracy, evaluate_answers
from geofed_apps.finetune.user_task import UserPair, UserSplit

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64}
LABELS = (" json", " asyncio", " xml")
HELD = tuple(UserPair(f"Docstring: item {i} of the set.\nPackage:", LABELS[i % 3]) for i in range(9))


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(FederationConfig.model_validate({"model": TINY}).model)
    return model.eval()


def _log_prob(model: torch.nn.Module, prompt: str, completion: str) -> float:
    """log p(completion | prompt), one token at a time on the unpadded sequence (bytes)."""
    ids = list(prompt.encode()) + list(completion.encode())
    total = 0.0
    with torch.no_grad():
        for k in range(len(prompt.encode()), len(ids)):
            logits = model(input_ids=torch.tensor([ids[:k]]), use_cache=False).logits[0, -1]
            total += float(F.log_softmax(logits.float(), dim=-1)[ids[k]])
    return total


def test_the_likeliest_label_by_its_whole_completion_is_the_answer_counted():
    for seed in (1, 2, 3):
        model = _model(seed)
        expected = 0
        for pair in HELD:
            scores = {label: _log_prob(model, pair.prompt, label) for label in LABELS}
            expected += max(scores, key=scores.__getitem__) == pair.completion

        got = closed_set_accuracy(model, HELD, LABELS)

        assert math.isclose(got, 100.0 * expected / len(HELD))


def test_a_model_that_learned_the_labels_scores_every_pair():
    """Trained 150 epochs on the held-out pairs themselves, a model must rank their own labels first."""
    model = _model(0).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        for pair in HELD:
            ids = torch.tensor([list((pair.prompt + pair.completion).encode())])
            logits = model(input_ids=ids[:, :-1], use_cache=False).logits[0]
            loss = F.cross_entropy(logits.float(), ids[0, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()

    assert closed_set_accuracy(model.eval(), HELD, LABELS) == 100.0
    assert evaluate_answers(model, list(HELD), candidates=LABELS).closed_set == 100.0
    assert evaluate_answers(model, list(HELD)).closed_set is None  # no candidates: not a closed-set score


def _split(train_labels, held) -> UserSplit:
    train = tuple(UserPair(f"p{i}", label) for i, label in enumerate(train_labels))
    return UserSplit((train[::2], train[1::2]), tuple(held), "test", Fit(0, 0, 0), 64)


def test_a_split_is_a_closed_set_when_its_held_out_completions_are_among_a_few_trained_ones():
    assert _split([" a", " b", " a", " c"], [UserPair("q", " b")]).candidates() == (" a", " b", " c")
    # a held-out completion never trained on: free text, not a closed set
    assert _split([" a", " b", " a", " c"], [UserPair("q", " d")]).candidates() is None
    # one completion is no choice; a hundred distinct ones is free text
    assert _split([" a", " a"], [UserPair("q", " a")]).candidates() is None
    many = [f" w{i}" for i in range(100)]
    assert _split(many, [UserPair("q", " w3")]).candidates() is None
