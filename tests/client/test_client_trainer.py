"""The local loop: it learns, accumulation matches a full batch, H/T stopping, resume, slowdown."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest
import torch

import client_agent.training.trainer as trainer_module
from client_agent.data.streams import TokenStream
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.training.flat import flatten, load_flat_
from client_agent.training.model import build_model
from client_agent.training.trainer import (
    LocalTrainer,
    NonFiniteLossError,
    micro_batches,
    micro_plan,
    scheduled_lr,
    warmup_lr,
)
from geofed.config import ModelConfig, TrainingConfig

MODEL = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, seed=1)
TEXT = "the quick brown fox jumps over the lazy dog. " * 400


def make(micro=4, **train):
    cfg = TrainingConfig(**{"lr": 3e-3, "warmup_steps": 2, "batch_size": 8, "precision": "fp32", **train})
    stream = TokenStream(ByteTokenizer().encode(TEXT), MODEL.block_size, seed=5, eval_fraction=0.1)
    return LocalTrainer(build_model(MODEL), cfg, stream, "cpu", micro_batch_size=micro)


def persisted(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize(("step", "warmup", "lr"), [(0, 4, 0.25), (1, 4, 0.5), (3, 4, 1.0), (100, 4, 1.0), (0, 0, 1.0)])
def test_warmup_lr(step, warmup, lr):
    assert warmup_lr(step, 1.0, warmup) == pytest.approx(lr)


@pytest.mark.parametrize(
    ("batch", "micro", "plan"), [(8, 4, [4, 4]), (8, 3, [3, 3, 2]), (10, 4, [4, 3, 3]), (3, 8, [3]), (5, 1, [1] * 5)]
)
def test_micro_batches(batch, micro, plan):
    assert micro_batches(batch, micro) == plan


@pytest.mark.parametrize(
    ("batch", "micro", "world", "plans"),
    [
        (5, 2, 2, [[1, 1], [2, 1]]),  # rank 0 has 2 rows, rank 1 has 3: both run 2 passes
        (8, 4, 2, [[4], [4]]),
        (5, 1, 2, [[1, 1, 0], [1, 1, 1]]),  # rank 0 joins the third pass with no rows
        (7, 3, 1, [[3, 2, 2]]),
        (9, 2, 4, [[1, 1], [1, 1], [1, 1], [2, 1]]),
    ],
)
def test_micro_plan_gives_every_rank_the_same_number_of_passes(batch, micro, world, plans):
    got = [micro_plan(batch, micro, rank, world) for rank in range(world)]
    assert got == plans
    assert sum(map(sum, got)) == batch and all(max(p) <= micro for p in got)


@pytest.mark.parametrize(
    ("schedule", "step", "lr"),
    [
        ("constant", 0, 0.25),  # warm-up over 4 steps
        ("constant", 50, 1.0),
        ("cosine", 0, 0.25),
        ("cosine", 4, 1.0),  # warm-up done: the peak
        ("cosine", 54, 0.55),  # half-way through the 100 decay steps: 0.1 + (1 - 0.1) / 2
        ("cosine", 104, 0.1),  # the floor
        ("cosine", 500, 0.1),  # stays there
    ],
)
def test_scheduled_lr_warms_up_then_decays_to_the_floor(schedule, step, lr):
    cfg = TrainingConfig(lr=1.0, warmup_steps=4, lr_schedule=schedule, lr_decay_steps=100, lr_min_ratio=0.1)
    assert scheduled_lr(step, cfg) == pytest.approx(lr)


def test_cosine_decay_defaults_to_max_steps_and_needs_an_end():
    cfg = TrainingConfig(lr=1.0, warmup_steps=0, lr_schedule="cosine", max_steps=10, lr_min_ratio=0.0)
    assert [round(scheduled_lr(s, cfg), 4) for s in (0, 5, 10)] == [1.0, 0.5, 0.0]
    with pytest.raises(ValueError, match="needs lr_decay_steps"):
        TrainingConfig(lr_schedule="cosine")


def test_training_reduces_loss_on_repeated_text():
    trainer = make()
    before = trainer.evaluate(2)

    stats = trainer.train(40)

    after = trainer.evaluate(2)
    assert stats.steps == 40 and stats.stopped_by == "steps"
    assert (stats.samples, stats.tokens) == (320, 320 * MODEL.block_size)
    assert stats.tokens_per_s > 0 and math.isfinite(stats.grad_norm)
    assert before > 5.0 and after < 2.5, (before, after)


@pytest.mark.parametrize("micro", [2, 3])
def test_grad_accumulation_matches_full_batch(micro):
    """Micro-batches of 2 (×4) or 3,3,2 give the same update as one batch of 8."""
    full, accumulated = make(micro=8), make(micro=micro)
    base = flatten(full.model)

    full_stats, acc_stats = full.train(3), accumulated.train(3)

    delta_full, delta_acc = flatten(full.model) - base, flatten(accumulated.model) - base
    # Only float summation order differs: relative error ~1e-6 (Adam amplifies it a little).
    assert (delta_full - delta_acc).norm() / delta_full.norm() < 1e-4
    assert (delta_full - delta_acc).abs().max() < 1e-5
    assert acc_stats.mean_loss == pytest.approx(full_stats.mean_loss, rel=1e-5)


def test_deadline_stops_early():
    ticks = itertools.count()
    trainer = make()
    trainer.clock = lambda: float(next(ticks))  # every clock reading advances one "second"

    stats = trainer.train(1000, deadline=10.0)

    assert stats.stopped_by == "deadline"
    assert 0 < stats.steps < 10


def test_deadline_already_passed_trains_nothing():
    stats = make().train(5, deadline=0.0)
    assert (stats.steps, stats.stopped_by, stats.tokens) == (0, "deadline", 0)
    assert math.isnan(stats.mean_loss)


def test_max_steps_in_total():
    trainer = make(max_steps=3)
    assert (trainer.train(2).steps, trainer.train(5).steps, trainer.train(5).steps) == (2, 1, 0)
    assert trainer.train(5).stopped_by == "max_steps"


def test_slowdown_sleeps_in_proportion_to_step_time():
    ticks, slept = itertools.count(), []
    trainer = make()
    trainer.slowdown, trainer.clock, trainer.sleep = 3.0, lambda: float(next(ticks)), slept.append

    stats = trainer.train(4)

    assert stats.steps == 4
    assert slept == [2.0] * 4  # each step "took" one tick; sleep (3 - 1) × that


def test_slowdown_below_one_is_rejected():
    with pytest.raises(ValueError, match="slowdown"):
        LocalTrainer(build_model(MODEL), TrainingConfig(), make().stream, "cpu", slowdown=0.5)


def test_resume_continues_exactly():
    """Model from the PS + saved optimizer/step/position = the same trajectory as never stopping."""
    trainer = make()
    trainer.train(3)
    snapshot, state = flatten(trainer.model), persisted(trainer.state_dict())
    trainer.train(2)

    relaunched = make()
    load_flat_(relaunched.model, snapshot)
    relaunched.load_state_dict(state)
    relaunched.train(2)

    assert relaunched.step == trainer.step == 5
    assert torch.equal(flatten(relaunched.model), flatten(trainer.model))


def poison_steps(monkeypatch, bad_steps, passes_per_step):
    """Make the loss NaN in every micro-step of the given steps (an fp16 overflow, say)."""
    calls = itertools.count()
    real = trainer_module.lm_loss

    def loss(model, chunk):
        step = next(calls) // passes_per_step
        out = real(model, chunk)
        return out * float("nan") if step in bad_steps else out

    monkeypatch.setattr(trainer_module, "lm_loss", loss)


def test_a_non_finite_step_is_skipped_like_grad_scaler_skips_it(monkeypatch):
    """Steps 0 and 2 train; step 1's NaN loss leaves the parameters as if it never ran, bar its data."""
    # Prepare: the reference trains step 0, drops step 1's batch, trains step 2.
    reference = make()
    reference.train(1)
    reference.stream.next_batch(8)
    reference.step += 1
    reference.train(1)
    trainer = make()
    poison_steps(monkeypatch, {1}, passes_per_step=2)

    # Execute
    stats = trainer.train(3)

    # Assert
    assert (stats.steps, stats.skipped_steps, stats.samples) == (3, 1, 16)
    assert math.isfinite(stats.mean_loss) and math.isfinite(stats.grad_norm)
    assert torch.equal(flatten(trainer.model), flatten(reference.model))


def test_a_round_with_every_step_non_finite_raises_and_changes_nothing(monkeypatch):
    trainer = make()
    before = flatten(trainer.model)
    poison_steps(monkeypatch, {0, 1, 2}, passes_per_step=2)

    with pytest.raises(NonFiniteLossError, match="reload the global model"):
        trainer.train(3)

    assert torch.equal(flatten(trainer.model), before)


def test_non_finite_loss_is_raised():
    trainer = make()
    with torch.no_grad():
        trainer.model.transformer.wte.weight.fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="reload the global model"):
        trainer.train(1)


def test_eval_is_deterministic_and_leaves_train_mode():
    trainer = make()
    assert trainer.evaluate(2) == trainer.evaluate(2)
    assert trainer.model.training


def test_auto_micro_batch_on_cpu():
    cfg = TrainingConfig(batch_size=20, precision="fp32")
    stream = TokenStream(np.arange(4000) % 257, MODEL.block_size)
    assert LocalTrainer(build_model(MODEL), cfg, stream, "cpu").micro_batch_size == 8
