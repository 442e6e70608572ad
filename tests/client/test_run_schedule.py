"""The inner learning rate over the whole run: warm-up by the client's own steps, then a cosine to a floor by
the federation's progress (seconds since the PS installed Θ0 over training.run_duration_s)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from client_agent.connection.ps_client import PSClient
from client_agent.data.streams import TokenStream
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.training.model import build_model
from client_agent.training.run_clock import RunClock
from client_agent.training.trainer import LocalTrainer, scheduled_lr
from geofed.config import FederationConfig, ModelConfig, TrainingConfig
from geofed.protocol import geofed_pb2 as pb
from geofed_apps.local_settings import fill_run_duration

RUN = {"lr_schedule": "cosine", "lr_progress": "run_time", "run_duration_s": 100.0}


def nanogpt_lr(it: int, progress: float, *, learning_rate: float, min_lr: float, warmup_iters: int) -> float:
    """nanoGPT's get_lr written out, its decay ratio replaced by the run's progress and its warm-up a factor."""
    warm = (it + 1) / warmup_iters if it < warmup_iters else 1.0
    decay_ratio = min(1.0, max(0.0, progress))
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return warm * (min_lr + coeff * (learning_rate - min_lr))


@pytest.mark.parametrize(
    ("step", "progress", "lr"),
    [
        (10, 0.0, 1.0),  # warm-up over, run just started: the peak
        (10, 0.5, 0.55),  # half-way: 0.1 + 0.9 / 2
        (10, 1.0, 0.1),  # the run's end: the floor
        (10, 0.25, 0.1 + 0.45 * (1 + math.sqrt(0.5))),  # cos(π/4) = √½
        (10, 1.7, 0.1),  # past the end: stays at the floor
        (0, 0.0, 0.25),  # first step of 4 warm-up steps
        (1, 0.5, 0.275),  # half-warm (2/4) at half-way: 0.5 × 0.55
        (3, 1.0, 0.1),  # warm-up's last step at the end of the run
    ],
)
def test_the_run_schedule_matches_hand_computed_values(step, progress, lr):
    cfg = TrainingConfig(lr=1.0, warmup_steps=4, lr_min_ratio=0.1, **RUN)

    assert scheduled_lr(step, cfg, progress) == pytest.approx(lr, abs=1e-12)


@pytest.mark.parametrize("step", [0, 2, 7, 40])
@pytest.mark.parametrize("progress", [0.0, 0.1, 0.33, 0.8, 0.999, 1.0])
def test_the_run_schedule_agrees_with_nanogpts_formula(step, progress):
    cfg = TrainingConfig(lr=3e-3, warmup_steps=8, lr_min_ratio=0.2, **RUN)

    expected = nanogpt_lr(step, progress, learning_rate=3e-3, min_lr=6e-4, warmup_iters=8)

    assert scheduled_lr(step, cfg, progress) == pytest.approx(expected, rel=1e-12)


def test_the_run_schedule_refuses_to_guess_a_missing_progress():
    with pytest.raises(ValueError, match="needs the run's progress"):
        scheduled_lr(5, TrainingConfig(**RUN))


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"lr_progress": "run_time", "run_duration_s": 100.0}, "needs lr_schedule 'cosine'"),
        ({"lr_schedule": "cosine", "lr_progress": "run_time"}, "needs run_duration_s > 0"),
        ({**RUN, "run_duration_s": -1.0}, "greater than or equal to 0"),
        ({**RUN, "lr_progress": "tokens"}, "'steps' or 'run_time'"),
    ],
)
def test_bad_run_schedule_settings_are_refused_with_the_reason(settings, fragment):
    with pytest.raises(ValidationError, match=fragment):
        FederationConfig.model_validate({"training": settings})


def test_a_run_time_schedule_needs_no_step_budget():
    cfg = TrainingConfig(**RUN)  # no max_steps, no lr_decay_steps: the run's seconds are the budget

    assert (cfg.max_steps, cfg.lr_decay_steps, cfg.run_duration_s) == (0, 0, 100.0)


def test_geofed_local_fills_the_runs_length_from_its_duration_unless_given():
    filled = fill_run_duration({"training": {"lr_schedule": "cosine", "lr_progress": "run_time"}}, 75.0)
    given = fill_run_duration({"training": {**RUN, "run_duration_s": 40.0}}, 75.0)
    by_steps = fill_run_duration({"training": {"lr_schedule": "cosine", "lr_decay_steps": 9}}, 75.0)

    assert filled["training"]["run_duration_s"] == 75.0
    assert given["training"]["run_duration_s"] == 40.0
    assert "run_duration_s" not in by_steps["training"]


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_run_clock_starts_at_the_first_model_and_takes_the_ps_start_when_it_has_one():
    wall, ps_start = _Clock(1000.0), [0.0]
    clock = RunClock(100.0, lambda: ps_start[0], clock=wall)

    assert clock() == 0.0  # no model yet: the run has not started
    clock.first_model()
    wall.now = 1030.0
    assert clock() == pytest.approx(0.30)
    ps_start[0] = 998.0  # a later Join named the PS's install time
    assert clock() == pytest.approx(0.32)
    wall.now = 5000.0
    assert clock() == 1.0


def test_the_run_clock_refuses_a_run_without_length():
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        RunClock(0.0, lambda: 0.0)


class _JoinStub:
    """A PS in the middle of a run: Θ0 was installed 60 s before this Join."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at

    def Join(self, request, timeout=None):  # noqa: N802 - the gRPC method name
        fed = FederationConfig(training=TrainingConfig(**RUN))
        return pb.JoinResponse(session="s", federation_json=fed.model_dump_json(), version=57,
                               server_instance="i1", rejoin_token="r", run_started_at=self.started_at)


def test_a_client_rejoining_mid_run_trains_at_the_federations_progress_from_its_first_step(tmp_path):
    # Prepare: a fresh client process (step 0, no checkpoint) joins a run 60 s into its 100 s
    wall = _Clock(10_060.0)
    ps = PSClient("127.0.0.1:1", "t.late", lambda: "one-time", insecure=True, state_dir=tmp_path)
    ps.stub = _JoinStub(started_at=10_000.0)
    ps.join()
    cfg = TrainingConfig(lr=1e-3, warmup_steps=0, lr_min_ratio=0.1, batch_size=2, precision="fp32", **RUN)
    model_cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, seed=1)
    stream = TokenStream(ByteTokenizer().encode("abcdefgh " * 200), model_cfg.block_size, seed=0)
    trainer = LocalTrainer(build_model(model_cfg), cfg, stream, "cpu", micro_batch_size=2)
    trainer.progress = RunClock(cfg.run_duration_s, lambda: ps.run_started_at, clock=wall)

    # Execute
    stats = trainer.train(1)

    # Assert: the rate of 60 % through the run, not the run's first step
    expected = 1e-4 + 0.5 * (1 + math.cos(0.6 * math.pi)) * (1e-3 - 1e-4)
    assert ps.run_started_at == 10_000.0
    assert stats.lr == pytest.approx(expected)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
    assert stats.lr < 0.5e-3
    ps.close()


def test_a_step_schedule_ignores_the_run_clock():
    cfg = TrainingConfig(lr=1.0, warmup_steps=0, lr_schedule="cosine", lr_decay_steps=10, lr_min_ratio=0.0)
    model_cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, seed=1)
    stream = TokenStream(ByteTokenizer().encode("abcdefgh " * 200), model_cfg.block_size, seed=0)
    trainer = LocalTrainer(build_model(model_cfg), cfg.model_copy(update={"batch_size": 2, "precision": "fp32"}),
                           stream, "cpu", micro_batch_size=2)
    trainer.progress = lambda: 1.0  # would put a run-time schedule at its floor

    stats = trainer.train(1)

    assert trainer.run_progress() is None
    assert stats.lr == pytest.approx(1.0)
    assert torch.isfinite(torch.tensor(stats.mean_loss))
