"""The local loop: it learns, accumulation matches a full batch, H/T stopping, resume, slowdown."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest
import torch

from client_agent.data import TokenStream
from client_agent.flat import flatten, load_flat_
from client_agent.model import build_model
from client_agent.tokenizer import ByteTokenizer
from client_agent.trainer import LocalTrainer, NonFiniteLossError, micro_batches, warmup_lr
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
