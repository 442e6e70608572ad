"""The user's pairs for `geofed local --paradigm --data`: held out by directory or a seeded fraction, dealt to the
clients, counted when cut to fit, refused when a completion cannot fit."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from client_agent.data.files import DataError
from client_agent.data.tokenizer import ByteTokenizer, load_tokenizer
from geofed_apps.finetune.answers import evaluate_answers
from geofed_apps.finetune.user_task import UserPair, UserSplit
from geofed_testing.user_model import make_bpe_tokenizer

TOK = ByteTokenizer()


def _pairs_dir(path, n, prompt_len=4):
    path.mkdir(parents=True)
    records = [{"prompt": f"{i:0{prompt_len}d}", "completion": f" {i}\n"} for i in range(n)]
    (path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_seeded_fraction_is_held_out_and_the_rest_dealt_to_the_clients(tmp_path):
    data = _pairs_dir(tmp_path / "d", 40)

    split = UserSplit.read(data, None, 3, 7, 0.1, TOK, 32)

    assert len(split.eval) == 4 and sum(map(len, split.clients)) == 36
    assert [len(c) for c in split.clients] == [12, 12, 12]
    trained = {p for c in split.clients for p in c}
    assert not trained & set(split.eval) and len(trained) == 36
    assert split == UserSplit.read(data, None, 3, 7, 0.1, TOK, 32)  # the seed decides
    assert split.eval != UserSplit.read(data, None, 3, 8, 0.1, TOK, 32).eval
    assert split.lines() == [f"held out: 4 of 40 pairs of {data} (training.eval_fraction 0.1, seed 7); "
                             "36 pairs trained on by 3 clients"]


def test_an_eval_directory_is_held_out_whole_and_every_pair_of_data_is_trained_on(tmp_path):
    data, held = _pairs_dir(tmp_path / "d", 10), _pairs_dir(tmp_path / "e", 3)

    split = UserSplit.read(data, held, 2, 0, 0.05, TOK, 32)

    assert split.eval == tuple(UserPair(f"{i:04d}", f" {i}\n") for i in range(3))
    assert sum(map(len, split.clients)) == 10
    assert split.lines()[0].startswith(f"held out: 3 pairs from {held} (1 files, --eval-data)")


def test_pairs_longer_than_the_context_are_counted_and_a_completion_that_cannot_fit_is_refused(tmp_path):
    data = _pairs_dir(tmp_path / "d", 10, prompt_len=40)  # 40 + 3 or 4 + EOS > 33

    split = UserSplit.read(data, None, 2, 0, 0.1, TOK, 32)

    assert split.lines()[1] == "cut to fit: 10 of 10 pairs exceed model.block_size 32 tokens and lose the start of " \
                               "their prompt"
    with pytest.raises(DataError, match=r"10 of 10 examples cannot fit a row of 4 tokens .* the first at .*:1;"):
        UserSplit.read(data, None, 2, 0, 0.1, TOK, 3)


def test_too_few_pairs_for_the_clients_is_refused(tmp_path):
    with pytest.raises(DataError, match="2 training pairs in .* are too few for 3 clients"):
        UserSplit.read(_pairs_dir(tmp_path / "d", 3), None, 3, 0, 0.1, TOK, 32)


def test_the_answer_scored_is_the_completions_first_line():
    assert UserPair("p", " GPL-3\nmore").answer == "GPL-3"


class _ScriptedLM(nn.Module):
    """Stands in for a causal LM: after `prompt_len` ids it predicts `script` one id at a time (a real model
    predicts from its weights; the decoding loop around it is the same)."""

    def __init__(self, prompt_len: int, script: list[int], vocab: int) -> None:
        super().__init__()
        self.config = SimpleNamespace(n_positions=256)
        self.prompt_len, self.script, self.vocab = prompt_len, script, vocab

    def forward(self, input_ids: torch.Tensor, use_cache: bool = False) -> SimpleNamespace:
        logits = torch.zeros(1, input_ids.shape[1], self.vocab)
        step = input_ids.shape[1] - self.prompt_len
        logits[0, -1, self.script[min(step, len(self.script) - 1)]] = 10.0
        return SimpleNamespace(logits=logits)


def test_greedy_answers_are_decoded_with_the_federations_tokenizer(tmp_path):
    tokenizer = load_tokenizer(make_bpe_tokenizer(tmp_path / "tok", vocab_size=300,
                                                  texts=["Licence: GPL-3\nLicence: MIT\n"] * 20))
    pair = UserPair("Licence:", " GPL-3")
    script = [int(i) for i in tokenizer.encode(" GPL-3\nMIT")]
    model = _ScriptedLM(len(tokenizer.encode(pair.prompt)), script, tokenizer.vocab_size)

    scores = evaluate_answers(model, [pair], tokenizer=tokenizer)

    assert scores.predictions == (" GPL-3",) and scores.exact_match == 100.0
