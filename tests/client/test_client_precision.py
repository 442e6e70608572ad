"""Precision and micro-batch choice per device."""

from __future__ import annotations

import contextlib

import pytest
import torch

from client_agent.training.model import build_model
from client_agent.training.precision import (
    CPU_MICRO_BATCH_CAP,
    DeviceMemoryError,
    PrecisionError,
    autocast,
    grad_scaler,
    largest_fitting,
    pick_micro_batch,
    pick_precision,
)
from geofed.config import ModelConfig


@pytest.mark.parametrize(
    ("requested", "expected"),
    [("auto", "fp32"), ("fp32", "fp32"), ("bf16", "bf16")],
)
def test_cpu_precision(requested, expected):
    assert pick_precision(requested, "cpu").name == expected


def test_fp16_needs_cuda():
    with pytest.raises(PrecisionError, match="needs a CUDA device"):
        pick_precision("fp16", "cpu")


def test_unknown_precision():
    with pytest.raises(PrecisionError, match="unknown precision"):
        pick_precision("fp8", "cpu")


def test_autocast_and_scaler_follow_precision():
    fp32, bf16 = pick_precision("fp32", "cpu"), pick_precision("bf16", "cpu")
    assert isinstance(autocast(fp32, "cpu"), contextlib.nullcontext)
    with autocast(bf16, "cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    assert not grad_scaler(fp32, "cpu").is_enabled()
    assert not bf16.use_scaler


def test_cpu_micro_batch_is_capped():
    model = build_model(ModelConfig(n_layer=1, n_embd=32, block_size=16))
    assert pick_micro_batch(model, 16, "cpu", 32) == CPU_MICRO_BATCH_CAP
    assert pick_micro_batch(model, 16, "cpu", 3) == 3
    with pytest.raises(ValueError, match="target_batch"):
        pick_micro_batch(model, 16, "cpu", 0)


def _fits_up_to(limit, tried):
    def fits(micro):
        tried.append(micro)
        if micro > limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    return fits


def test_largest_fitting_halves_on_oom():
    tried, cleanups = [], []
    assert largest_fitting(32, _fits_up_to(5, tried), lambda: cleanups.append(1), "on test") == 4
    assert tried == [32, 16, 8, 4]
    assert len(cleanups) == 3


def test_largest_fitting_gives_up_clearly_at_one():
    with pytest.raises(DeviceMemoryError, match="does not fit on test even at micro-batch 1"):
        largest_fitting(4, _fits_up_to(0, []), lambda: None, "on test")


def test_largest_fitting_does_not_swallow_other_errors():
    def broken(micro):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        largest_fitting(4, broken, lambda: None, "on test")


def test_largest_fitting_halves_every_rank_when_one_runs_out_of_memory():
    """Two ranks probe in lockstep: this one fits 16, the other only 4, so both settle on 4."""
    # Prepare: `agree` plays the all-reduce MIN with a rank that fits up to 4.
    tried, other = [], _fits_up_to(4, [])

    def agree(ok):
        try:
            other(tried[-1])
            return ok
        except RuntimeError:
            return False

    # Execute
    micro = largest_fitting(32, _fits_up_to(16, tried), lambda: None, "on test", agree)

    # Assert: this rank's own probe succeeded at 16 and 8, yet it went on halving with the other rank.
    assert micro == 4
    assert tried == [32, 16, 8, 4]
