"""Prompt/completion data: loading, refusals, one example per row with the loss on the completion only,
a resumable stream, text data unchanged, and a model that learns the completions through LocalTrainer."""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from client_agent.data import files
from client_agent.data.batch import MaskedBatch
from client_agent.data.files import DataError, Examples, load_data, load_tokens
from client_agent.data.streams import ExampleStream, TokenStream, open_stream
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.training.model import build_model, lm_loss
from client_agent.training.trainer import LocalTrainer
from geofed.config import ModelConfig, TrainingConfig

TOK = ByteTokenizer()
EOS = TOK.eos_id


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def pairs(n, seed=0):
    """`n` (prompt, completion) pairs of varying lengths."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        word = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 9)))
        out.append((f"q{i}: {word} is ", ("long" if len(word) > 4 else "short") + "\n"))
    return out


def examples_of(prs) -> Examples:
    """Examples built by hand from (prompt, completion) pairs (byte ids; prompt, completion, EOS)."""
    rows = [list(p.encode()) + list(c.encode()) + [EOS] for p, c in prs]
    starts = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return Examples(
        tokens=np.array([t for r in rows for t in r], dtype=np.uint16),
        starts=starts,
        prompt_lens=np.array([len(p.encode()) for p, _ in prs], dtype=np.int64),
        origins=np.array([[0, i + 1] for i in range(len(prs))], dtype=np.int64).reshape(-1, 2),
        files=("hand.jsonl",),
    )


def test_loads_prompt_completion_records_as_examples(tmp_path):
    path = write_jsonl(
        tmp_path / "d" / "qa.jsonl",
        [{"prompt": "ab", "completion": "cd", "extra": 1}, "", {"prompt": "é", "completion": ""}],
    )

    loaded, report = load_data(tmp_path / "d", TOK)

    assert isinstance(loaded, Examples) and len(loaded) == 2
    first = [*b"ab", *b"cd", EOS]
    second = [*"é".encode(), EOS]
    assert loaded.tokens.tolist() == first + second
    assert loaded.starts.tolist() == [0, 5, 5 + 3]
    assert loaded.prompt_lens.tolist() == [2, 2]
    assert loaded.counted.tolist() == [3, 1]  # "cd" + EOS; EOS alone
    assert loaded.where(1) == f"{path}:3"
    assert (report.examples, report.tokens, report.files) == (2, 8, 1)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "a"}, r"qa.jsonl:2: a prompt/completion record has no 'completion' field"),
        ({"completion": "a"}, r"qa.jsonl:2: a prompt/completion record has no 'prompt' field"),
        ({"prompt": "a", "completion": 3}, r"qa.jsonl:2: 'completion' must be a string, got int"),
        ({"prompt": ["a"], "completion": "b"}, r"qa.jsonl:2: 'prompt' must be a string, got list"),
        ({"prompt": "", "completion": "b"}, r"qa.jsonl:2: the prompt is empty"),
        ({"text": "t", "prompt": "a", "completion": "b"}, r"qa.jsonl:2: a record mixes the prompt/completion and text"),
    ],
)
def test_a_bad_prompt_completion_record_is_a_data_error_naming_its_line(tmp_path, record, message):
    write_jsonl(tmp_path / "qa.jsonl", [{"prompt": "ok", "completion": "fine"}, record])
    with pytest.raises(DataError, match=message):
        load_data(tmp_path, TOK)


def test_text_and_prompt_completion_in_one_run_is_a_data_error(tmp_path):
    write_jsonl(tmp_path / "one" / "mixed.jsonl", [{"text": "doc"}, {"prompt": "a", "completion": "b"}])
    mixed = r"mix text \(.*mixed.jsonl:1\) and prompt/completion records \(.*mixed.jsonl:2\)"
    with pytest.raises(DataError, match=mixed):
        load_data(tmp_path / "one", TOK)

    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.txt").write_text("plain text")
    write_jsonl(tmp_path / "two" / "b.jsonl", [{"prompt": "a", "completion": "b"}])
    with pytest.raises(DataError, match=r"mix text \(.*a.txt\) and prompt/completion records \(.*b.jsonl:1\)"):
        load_data(tmp_path / "two", TOK)


def test_text_only_uses_refuse_prompt_completion_data(tmp_path):
    write_jsonl(tmp_path / "qa.jsonl", [{"prompt": "a", "completion": "b"}])
    with pytest.raises(DataError, match="qa.jsonl:1 holds prompt/completion records; this use needs text data"):
        load_tokens(tmp_path, TOK)


def test_examples_cache_loads_without_tokenising(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "d" / "qa.jsonl", [{"prompt": p, "completion": c} for p, c in pairs(5)])
    cache = tmp_path / "run" / "tokens.npy"
    first, report = load_data(tmp_path / "d", TOK, cache=cache)

    def must_not_tokenize(*args, **kwargs):
        raise AssertionError("tokenised again despite a valid cache")

    monkeypatch.setattr(files, "tokenize_files", must_not_tokenize)
    again, report_again = load_data(tmp_path / "d", TOK, cache=cache)

    assert isinstance(again, Examples) and report_again == report and again.files == first.files
    for name in ("tokens", "starts", "prompt_lens", "origins"):
        assert np.array_equal(getattr(again, name), getattr(first, name)), name


def test_a_row_is_prompt_completion_eos_padded_with_the_mask_on_completion_and_eos():
    stream = ExampleStream(examples_of([("ab", "cd"), ("x", "y")]), 8, eval_examples=examples_of([("p", "q")]))
    batch = stream.next_batch(2)
    rows = {tuple(r) for r in batch.tokens.tolist()}
    a, b, c, d, x, y = (ord(ch) for ch in "abcdxy")
    expected = {
        (a, b, c, d, EOS, EOS, EOS, EOS, EOS): [False, True, True, True, False, False, False, False],
        (x, y, EOS, EOS, EOS, EOS, EOS, EOS, EOS): [True, True, False, False, False, False, False, False],
    }
    assert rows == set(expected)
    for row, mask in zip(batch.tokens.tolist(), batch.mask.tolist(), strict=True):
        assert mask == expected[tuple(row)]
    assert batch.total == 3 + 2


def test_a_long_prompt_loses_its_start_and_a_completion_that_cannot_fit_is_refused():
    stream = ExampleStream(examples_of([("0123456789", "ab")]), 6, eval_examples=examples_of([("p", "q")]))
    batch = stream.next_batch(1)
    assert bytes(batch.tokens[0, :-1].tolist()).decode() == "6789ab"  # 7 tokens: the prompt's last 4, "ab", EOS
    assert batch.tokens[0, -1] == EOS
    assert batch.mask[0].tolist() == [False, False, False, True, True, True]

    refused = r"1 of 3 examples cannot fit a row of 7 tokens .* the first at hand.jsonl:2;"
    with pytest.raises(DataError, match=refused):
        ExampleStream(examples_of([("p", "ok"), ("p", "abcdef")]), 6, eval_examples=examples_of([("p", "q")]))


def test_examples_cut_to_fit_are_counted_once_in_a_log_line(caplog):
    long = [("0123456789", "ab"), ("0123456789", "c")]
    with caplog.at_level("INFO", logger="client_agent.data"):
        ExampleStream(examples_of([("p", "q"), *long]), 6, eval_examples=examples_of([("0123456789", "ab")]))
        held = examples_of(long)
        ExampleStream(held, 6, eval_examples=held)  # an evaluator's: the same examples, counted once
    lines = [r.getMessage() for r in caplog.records if "event=examples_cut" in r.getMessage()]
    assert lines == ["event=examples_cut examples=3 of=4 block_size=6 how=prompt_start_dropped",
                     "event=examples_cut examples=2 of=2 block_size=6 how=prompt_start_dropped"]


def test_masked_loss_is_the_cross_entropy_of_the_completion_and_eos_tokens_only():
    prs = pairs(6, seed=1)
    model = build_model(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, seed=2))
    stream = ExampleStream(examples_of(prs), 32, eval_examples=examples_of(prs))
    batch = stream.eval_batches(1, 6)[0]  # evenly spaced over 6 examples: each once, in order

    with torch.no_grad():
        got = lm_loss(model, batch)
        logits = model(input_ids=batch.tokens[:, :-1], use_cache=False).logits
    # Reference from the pairs themselves: the targets at row positions len(prompt) .. len(prompt + completion).
    losses = []
    for i, (p, c) in enumerate(prs):
        n_prompt, n_completion = len(p.encode()), len(c.encode())
        for k in range(n_prompt, n_prompt + n_completion + 1):  # the completion's tokens, then EOS
            losses.append(-F.log_softmax(logits[i, k - 1].double(), -1)[batch.tokens[i, k]])
    assert len(losses) == batch.total == sum(len(c) + 1 for _, c in prs)
    assert float(got) == pytest.approx(float(torch.stack(losses).mean()), rel=1e-5)
    with torch.no_grad():
        plain = lm_loss(model, batch.tokens)  # every target: the prompt's and the padding's too
    assert abs(float(plain) - float(got)) > 1e-3


def _question(row: list[int]) -> str:
    """The `q<i>` a row's prompt starts with."""
    return bytes(t for t in row if t < 256).split(b": ")[0].decode()


def _stream(n=50, seed=3, block=32):
    return ExampleStream(examples_of(pairs(n)), block, seed, eval_fraction=0.1)


def test_example_stream_resume_gives_exactly_the_uninterrupted_batches():
    reference = _stream()
    uninterrupted = [reference.next_batch(7) for _ in range(30)]  # crosses several epochs of 45 examples

    for cut in (0, 6, 17, 29):
        first = _stream()
        seen = [first.next_batch(7) for _ in range(cut)]
        resumed = _stream()
        resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
        seen += [resumed.next_batch(7) for _ in range(30 - cut)]
        for a, b in zip(seen, uninterrupted, strict=True):
            assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask) and a.total == b.total, cut


def test_each_epoch_visits_every_training_example_once_shuffled_and_eval_is_held_out():
    stream = _stream()
    assert (len(stream.examples), len(stream.eval_examples)) == (45, 5)
    batch = stream.next_batch(45)
    prompts = [_question(r) for r in batch.tokens.tolist()]
    assert sorted(prompts, key=lambda q: int(q[1:])) == [f"q{i}" for i in range(45)]
    assert prompts != sorted(prompts, key=lambda q: int(q[1:]))
    assert stream.position == (1, 0)

    a = stream.eval_batches(2, 4)
    stream.next_batch(20)
    b = stream.eval_batches(2, 4)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.mask, y.mask)
    held = {_question(r) for x in a for r in x.tokens.tolist()}
    assert held <= {f"q{i}" for i in range(45, 50)}


def test_ranks_split_the_same_global_batch_and_share_its_count():
    whole = _stream().next_batch(9)
    parts = [_stream().next_batch(9, rank=r, world=2) for r in range(2)]
    assert torch.equal(torch.cat([p.tokens for p in parts]), whole.tokens)
    assert torch.equal(torch.cat([p.mask for p in parts]), whole.mask)
    assert [p.total for p in parts] == [whole.total] * 2 == [int(whole.mask.sum())] * 2


def test_a_position_from_other_data_or_the_other_kind_is_refused():
    state = _stream(seed=3).state_dict()
    with pytest.raises(DataError, match="seed=3"):
        _stream(seed=4).load_state_dict(state)
    with pytest.raises(DataError, match="num_examples"):
        _stream(n=60).load_state_dict(state)
    text = TokenStream(np.arange(5000) % 257, 16, 3, eval_fraction=0.1)
    with pytest.raises(DataError, match="saved on prompt/completion examples"):
        text.load_state_dict(state)
    with pytest.raises(DataError, match="saved on text data"):
        _stream().load_state_dict(text.state_dict())


def test_open_stream_picks_the_stream_by_kind_and_holds_out_the_given_data():
    examples, held = examples_of(pairs(10)), examples_of(pairs(3, seed=9))
    stream = open_stream(examples, 32, eval_data=held)
    assert isinstance(stream, ExampleStream) and len(stream.examples) == 10 and stream.eval_examples is held
    with pytest.raises(DataError, match="evaluation data are text"):
        open_stream(examples, 32, eval_data=np.arange(100))
    with pytest.raises(DataError, match="evaluation data are prompt/completion examples"):
        open_stream(np.arange(100), 32, eval_data=held)


def test_too_few_examples_is_a_clear_error():
    with pytest.raises(DataError, match="1 examples are too few"):
        ExampleStream(examples_of(pairs(1)), 32)


def test_text_batches_are_bit_identical_to_before():
    """Digest of TokenStream batches for a fixed seed, taken with the code before prompt/completion data."""
    s = open_stream(np.arange(5000, dtype=np.int64) % 257, 16, 3, eval_fraction=0.1)
    assert isinstance(s, TokenStream)
    h = hashlib.sha256()
    for i in range(60):
        b = s.next_batch(7, rank=i % 2, world=2) if i % 3 == 0 else s.next_batch(7)
        h.update(str(tuple(b.shape)).encode())
        h.update(b.numpy().tobytes())
    for b in s.eval_batches(3, 4, rank=1, world=2):
        h.update(b.numpy().tobytes())
    assert (h.hexdigest(), s.position) == ("e68c106df3250fea55ce5a0f906db44e5ca992c98dce27719190ee66591ba7d8", (1, 140))


MODEL = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, seed=1)


def _trainer(micro: int, **train) -> LocalTrainer:
    cfg = TrainingConfig(**{"lr": 3e-3, "warmup_steps": 2, "batch_size": 8, "precision": "fp32", **train})
    return LocalTrainer(build_model(MODEL), cfg, _stream(n=200, seed=5), "cpu", micro_batch_size=micro)


def _step_gradient(trainer: LocalTrainer) -> torch.Tensor:
    """The gradient the trainer's next step applies (taken as the optimizer steps)."""
    seen = []
    step = trainer.optimizer.step

    def capture(*args, **kwargs):
        seen.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters()]).clone())
        return step(*args, **kwargs)

    trainer.optimizer.step = capture
    trainer.train(1)
    return seen[0]


def test_micro_batches_weigh_counted_targets_into_the_global_batch_mean():
    """The step's gradient is that of the mean over every counted target of the global batch, however the
    batch is split into micro-batches (3, 3, 2 rows with different counts here)."""
    split = _trainer(3, grad_clip=0.0)  # the gradient as computed, not clipped
    batch = _stream(n=200, seed=5).next_batch(8)  # the batch the trainer will draw
    reference_model = build_model(MODEL)
    lm_loss(reference_model, batch).backward()  # one pass: the mean over all counted targets
    reference = torch.cat([p.grad.flatten() for p in reference_model.parameters()])
    per_row_model = build_model(MODEL)  # the other weighting: each micro-batch by its rows
    sum(lm_loss(per_row_model, batch[i : i + 3]) * len(batch[i : i + 3]) / 8 for i in (0, 3, 6)).backward()
    per_row = torch.cat([p.grad.flatten() for p in per_row_model.parameters()])

    got = _step_gradient(split)

    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-6)
    assert (per_row - reference).norm() > 1e-3 * reference.norm()  # the weighting matters on this batch
    full, micro = _trainer(8), _trainer(3)
    assert full.evaluate(2) == pytest.approx(micro.evaluate(2), rel=1e-6)  # eval passes follow the plan too
    assert full.train(2).mean_loss == pytest.approx(micro.train(2).mean_loss, rel=1e-5)


def test_a_model_learns_the_completions_through_local_trainer():
    trainer = _trainer(3)
    before = trainer.evaluate(2)
    stats = trainer.train(20)
    after = trainer.evaluate(2)
    assert isinstance(trainer.stream.next_batch(1), MaskedBatch)
    assert stats.steps == 20 and np.isfinite(stats.mean_loss)
    assert after < 0.3 * before, (before, after)  # ~5.6 -> ~1.0 nats per completion token
