"""DPO: the loss against a hand computation, completion log-probabilities against a token-by-token loop,
preference records refused with their file and line, and a local update that moves the policy toward the
chosen completions of its own pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from client_agent.data.files import load_data
from client_agent.data.records import DataError
from client_agent.data.streams import ExampleStream
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.paradigms import client_paradigm
from client_agent.paradigms.dpo import DPO, Encoded, Preference, dpo_loss, read_preferences, reference, rows
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig
from geofed_apps.finetune.preference import preferences_of, score_preferences, write_preferences
from geofed_apps.finetune.task import QAPair

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 48}


def _fed(**paradigm: object) -> FederationConfig:
    return FederationConfig.model_validate({
        "model": TINY, "training": {"batch_size": 4, "lr": 1e-2, "warmup_steps": 0},
        "paradigm": {"name": "dpo", "rank": 4, "alpha": 8.0, "target_modules": ["c_attn"], **paradigm},
    })


@pytest.mark.parametrize("kind", ["sigmoid", "ipo"])
def test_the_loss_is_dpo_s_or_ipo_s_formula_by_hand(kind):
    """Two pairs' summed log-probabilities: margins 2 and -1, β = 0.1."""
    # Prepare: pair 0: policy (-3, -5), reference (-4, -4): margin (1) - (-1) = 2;
    # pair 1: policy (-6, -2), reference (-5, -2): margin (-1) - (0) = -1.
    pc, pr = torch.tensor([-3.0, -6.0]), torch.tensor([-5.0, -2.0])
    rc, rr = torch.tensor([-4.0, -5.0]), torch.tensor([-4.0, -2.0])
    # Execute
    loss = float(dpo_loss(pc, pr, rc, rr, beta=0.1, kind=kind))
    # Assert
    if kind == "sigmoid":  # -log σ(x) = log(1 + e^-x)
        expected = (math.log(1 + math.exp(-0.2)) + math.log(1 + math.exp(0.1))) / 2
    else:  # (margin - 1/(2β))² = (2 - 5)², (-1 - 5)²
        expected = (9.0 + 36.0) / 2
    assert loss == pytest.approx(expected, rel=1e-6)


def test_an_unknown_loss_is_refused():
    with pytest.raises(ValueError, match="paradigm.loss 'hinge'"):
        dpo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1), 0.1, "hinge")


def _model(fed: FederationConfig) -> tuple[DPO, torch.nn.Module]:
    torch.manual_seed(0)
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    with torch.no_grad():  # adapters that change the function, so policy and reference differ
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return paradigm, model.eval()


def _by_hand(model: torch.nn.Module, prompt: str, completion: str) -> float:
    """Σ log p(token | prefix) over the completion and EOS, one unpadded sequence, token by token."""
    tok = ByteTokenizer()
    ids = [int(t) for t in tok.encode(prompt)]
    total = 0.0
    for target in [int(t) for t in tok.encode(completion)] + [tok.eos_id]:
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        total += float(F.log_softmax(logits.float(), dim=-1)[target])
        ids.append(target)
    return total


def test_completion_log_probabilities_of_padded_pairs_match_a_token_by_token_sum():
    # Prepare: completions of different lengths, so rows are padded
    _, model = _model(_fed())
    prefs = [Preference("# f: add x to y\n# parameters: ", "x y\n", "z\n", ""),
             Preference("# g: t\n# parameters: ", "t\n", "alpha beta\n", "")]
    pairs = Encoded.of(prefs, ByteTokenizer(), TINY["block_size"])
    # Execute
    with torch.no_grad():
        chosen, rejected = pairs.logprobs(model, torch.arange(2), torch.device("cpu"))
        ref_c, ref_r = pairs.reference_logprobs(model, torch.device("cpu"))
        with reference(model):
            base = [_by_hand(model, p.prompt, p.chosen) for p in prefs]
        policy_c = [_by_hand(model, p.prompt, p.chosen) for p in prefs]
        policy_r = [_by_hand(model, p.prompt, p.rejected) for p in prefs]
    # Assert
    assert chosen.tolist() == pytest.approx(policy_c, abs=1e-4)
    assert rejected.tolist() == pytest.approx(policy_r, abs=1e-4)
    assert ref_c.tolist() == pytest.approx(base, abs=1e-4)
    assert ref_c.tolist() != pytest.approx(chosen.tolist(), abs=1e-3)  # the adapters do change the function


def test_a_long_prompt_loses_its_start_and_the_completion_is_kept_whole():
    ids, mask = rows(ByteTokenizer(), "p" * 100, ["abc"], block_size=8)
    assert ids.shape == (1, 9)
    assert bytes(ids[0, :5].tolist()) == b"ppppp" and bytes(ids[0, 5:8].tolist()) == b"abc" and ids[0, 8] == 256
    assert mask[0].tolist() == [False] * 4 + [True] * 4  # targets a, b, c and the EOS


@pytest.mark.parametrize(("line", "message"), [
    ('{"prompt": "p", "chosen": "a"', "not a JSON line"),
    ('["p", "a", "b"]', "must be a JSON object"),
    ('{"prompt": "p", "chosen": "a"}', "has no 'rejected' field"),
    ('{"prompt": "p", "chosen": 3, "rejected": "b"}', "'chosen' must be a non-empty string"),
    ('{"prompt": "", "chosen": "a", "rejected": "b"}', "'prompt' must be a non-empty string"),
    ('{"prompt": "p", "chosen": "a", "rejected": "a"}', "the same completion"),
])
def test_a_malformed_preference_record_is_refused_naming_its_file_and_line(tmp_path, line, message):
    path = tmp_path / "prefs.jsonl"
    path.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n\n' + line + "\n")
    with pytest.raises(DataError, match=rf"^{path}:3: .*{message}"):
        read_preferences(path)


def test_a_file_without_preference_records_is_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(DataError, match=rf"^{path}: holds no preference record"):
        read_preferences(path)


def test_the_docstring_task_s_pairs_reject_another_pair_s_answer(tmp_path):
    pairs = [QAPair(f"# f{i}: uses {w}", w) for i, w in enumerate(["a", "b", "a", "c"])]
    prefs = preferences_of(pairs, np.random.default_rng(0))
    read = read_preferences(write_preferences(tmp_path / "p.jsonl", prefs))
    assert [p.chosen for p in read] == [p.completion for p in pairs]
    assert all(p.rejected != p.chosen and p.rejected in {"a\n", "b\n", "c\n"} for p in read)
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert all(sorted(r) == ["chosen", "prompt", "rejected"] for r in records)  # the preference schema alone
    examples, _ = load_data([tmp_path / "p.jsonl"], ByteTokenizer())  # a client's data reader takes them as is
    assert examples.preferences and len(examples) == len(pairs)


def _stream(tmp_path: Path, prefs: list[Preference]) -> ExampleStream:
    examples, _ = load_data([write_preferences(tmp_path / "train.jsonl", prefs)], ByteTokenizer())
    return ExampleStream(examples, TINY["block_size"], seed=0, eval_fraction=0.25)


def test_local_updates_raise_the_margin_and_accuracy_of_the_client_s_own_pairs(tmp_path):
    # Prepare: chosen and rejected answers of the same length (the base has no length preference to lean on)
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    prefs = [Preference(f"# f: takes {w}\n# parameters: ", f"{w}\n", f"{words[(i + 3) % 8]}\n", "")
             for i, w in enumerate(words)]
    fed = _fed()
    paradigm = client_paradigm(fed.paradigm)
    torch.manual_seed(0)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    stream = _stream(tmp_path, prefs)
    trained = prefs[: len(stream.examples)]
    before = score_preferences(model, trained, ByteTokenizer(), TINY["block_size"], 0.1)
    trainer = LocalTrainer(model, fed.training, stream, "cpu", micro_batch_size=4)
    # Execute
    stats = paradigm.local_update(trainer, steps=30, deadline=None, version=1)
    after = score_preferences(model, trained, ByteTokenizer(), TINY["block_size"], 0.1)
    # Assert
    assert stats.steps == 30 and trainer.step == 30 and math.isfinite(stats.mean_loss)
    assert before.margin == 0.0  # adapters at init (B = 0): the policy is the reference
    assert after.margin > 0 and after.accuracy > before.accuracy
    assert stats.mean_loss < math.log(2)  # the loss at the reference, margin 0, is -log σ(0) = log 2


def test_text_data_is_refused_by_name(tmp_path):
    from client_agent.data.streams import TokenStream

    fed = _fed()
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    trainer = LocalTrainer(model, fed.training, TokenStream(np.arange(400) % 250, TINY["block_size"]), "cpu",
                           micro_batch_size=4)
    with pytest.raises(ValueError, match="trains on preference records"):
        paradigm.local_update(trainer, steps=1, deadline=None, version=1)


def test_the_reference_log_probabilities_are_computed_once_per_pair_and_kept(tmp_path, monkeypatch):
    # Prepare: count the reference passes over two rounds
    words = ["alpha", "beta", "gamma", "delta"]
    prefs = [Preference(f"# f: {w}\n# parameters: ", f"{w}\n", f"{words[(i + 1) % 4]}\n", "")
             for i, w in enumerate(words)]
    fed = _fed()
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    trainer = LocalTrainer(model, fed.training, _stream(tmp_path, prefs), "cpu", micro_batch_size=4)
    calls = []
    original = Encoded.reference_logprobs
    monkeypatch.setattr(Encoded, "reference_logprobs", lambda self, *a, **k: calls.append(len(self)) or
                        original(self, *a, **k))
    # Execute
    paradigm.local_update(trainer, steps=2, deadline=None, version=1)
    first = paradigm._ref
    paradigm.local_update(trainer, steps=2, deadline=None, version=2)
    # Assert: one pass over the 3 training pairs (one of 4 held out), the same tensors in round 2
    assert calls == [3] and paradigm._ref is first


def test_eval_metrics_are_the_held_out_pairs_accuracy_and_mean_reward_margin(tmp_path):
    # Prepare: adapters that change the function (policy ≠ reference), and a stream holding a quarter of the
    # pairs out
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    prefs = [Preference(f"# f: takes {w}\n# parameters: ", f"{w}\n", f"{words[(i + 3) % 8]}\n", "")
             for i, w in enumerate(words)]
    fed = _fed()
    paradigm, model = _model(fed)
    model.train()
    stream = _stream(tmp_path, prefs)
    held = prefs[len(stream.examples):]
    assert len(held) == len(stream.eval_examples) == 2
    trainer = LocalTrainer(model, fed.training, stream, "cpu", micro_batch_size=4)

    # Execute
    metrics = paradigm.eval_metrics(trainer)

    # Assert: against token-by-token sums of the held-out pairs, policy and reference
    with torch.no_grad():
        model.eval()
        pc = np.array([_by_hand(model, p.prompt, p.chosen) for p in held])
        pr = np.array([_by_hand(model, p.prompt, p.rejected) for p in held])
        with reference(model):
            rc = np.array([_by_hand(model, p.prompt, p.chosen) for p in held])
            rr = np.array([_by_hand(model, p.prompt, p.rejected) for p in held])
    beta = fed.paradigm.beta
    assert set(metrics) == {"preference_accuracy", "reward_margin"}
    assert metrics["preference_accuracy"] == pytest.approx(100.0 * np.mean(pc > pr))
    assert metrics["reward_margin"] == pytest.approx(float(np.mean(beta * ((pc - rc) - (pr - rr)))), abs=1e-4)
    assert metrics["reward_margin"] != 0.0


def test_a_client_without_held_out_preferences_reports_no_metrics():
    from client_agent.data.streams import TokenStream

    fed = _fed()
    paradigm, model = _model(fed)
    trainer = LocalTrainer(model, fed.training, TokenStream(np.arange(400) % 250, TINY["block_size"]), "cpu",
                           micro_batch_size=4)

    assert paradigm.eval_metrics(trainer) == {}
