"""Atomic checkpoints: round trip, crash and disk-full safety, and the top-k best set."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import torch

from client_agent.data.streams import TokenStream
from client_agent.training import checkpoint as ckpt_mod
from client_agent.training.checkpoint import (
    CheckpointError,
    CheckpointManager,
    ClientCheckpoint,
    load_checkpoint,
    save_checkpoint,
)
from client_agent.training.flat import flatten
from client_agent.training.model import build_model
from client_agent.training.trainer import LocalTrainer
from geofed.config import ModelConfig, TrainingConfig


def small(step=0, value=0.0):
    return ClientCheckpoint(
        model=torch.full((10,), value),
        optimizer={},
        step=step,
        data_position={"epoch": 0, "index": step},
        base_version=step,
    )


def test_round_trip_of_a_real_trainer_state(tmp_path):
    model = build_model(ModelConfig(n_layer=1, n_embd=32, block_size=16))
    stream = TokenStream(np.arange(3000) % 257, 16)
    trainer = LocalTrainer(model, TrainingConfig(batch_size=4, precision="fp32"), stream, "cpu")
    trainer.train(2)
    residual = {"codec": torch.randn(flatten(model).numel())}
    saved = ClientCheckpoint(
        model=flatten(model), base_version=7, residual=residual, eval_loss=3.5, **trainer.state_dict()
    )

    path = save_checkpoint(tmp_path / "latest.pt", saved)
    loaded = load_checkpoint(path)

    assert torch.equal(loaded.model, saved.model)
    assert torch.equal(loaded.residual["codec"], residual["codec"])
    assert (loaded.step, loaded.base_version, loaded.eval_loss) == (2, 7, 3.5)
    assert loaded.data_position == stream.state_dict()
    fresh = LocalTrainer(
        build_model(ModelConfig(n_layer=1, n_embd=32, block_size=16)),
        TrainingConfig(batch_size=4, precision="fp32"),
        TokenStream(np.arange(3000) % 257, 16),
        "cpu",
    )
    fresh.load_state_dict(loaded.trainer_state())
    assert fresh.step == 2 and fresh.stream.position == stream.position


def _leftovers(directory):
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


def test_crash_mid_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "latest.pt", small(1, 1.0))

    def crash(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # killed mid-write

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, small(2, 2.0))
    monkeypatch.undo()

    assert load_checkpoint(path).step == 1
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_disk_full_is_one_line_and_keeps_the_good_file(tmp_path, monkeypatch, where):
    path = save_checkpoint(tmp_path / "latest.pt", small(1, 1.0))
    before = path.read_bytes()
    disk_full = OSError(errno.ENOSPC, "No space left on device")

    if where == "write":

        def full_disk_save(obj, f):
            f.write(b"partial")
            raise disk_full

        monkeypatch.setattr(torch, "save", full_disk_save)
    else:

        def full_disk_fsync(fd):
            raise disk_full

        monkeypatch.setattr(ckpt_mod.os, "fsync", full_disk_fsync)

    with pytest.raises(CheckpointError, match="disk full") as info:
        save_checkpoint(path, small(2, 2.0))
    monkeypatch.undo()

    assert "\n" not in str(info.value) and "previous file intact" in str(info.value)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_other_write_errors_are_checkpoint_errors(tmp_path, monkeypatch):
    def denied(src, dst):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(ckpt_mod.os, "replace", denied)
    with pytest.raises(CheckpointError, match="Permission denied"):
        save_checkpoint(tmp_path / "latest.pt", small())
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_corrupt_missing_and_foreign_files(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "none.pt")
    (tmp_path / "junk.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"format": 99}, tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="format 99"):
        load_checkpoint(tmp_path / "future.pt")


def test_manager_latest(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt")
    assert manager.load_latest() is None

    manager.save_latest(small(1))
    manager.save_latest(small(2))

    assert manager.load_latest().step == 2
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["latest.pt"]


def test_manager_keeps_the_k_lowest_eval_losses(tmp_path):
    manager = CheckpointManager(tmp_path, keep_best=3)
    losses = {100: 3.0, 200: 2.5, 300: 2.8, 400: 2.9, 500: 2.6, 600: 4.0}

    kept = {step: manager.consider(loss, step, small(step)) for step, loss in losses.items()}

    assert kept[600] is None  # worse than all three kept
    assert [(loss, step) for loss, step, _ in manager.best()] == [(2.5, 200), (2.6, 500), (2.8, 300)]
    assert sorted(p.name for p in tmp_path.glob("best-*.pt")) == ["best-200.pt", "best-300.pt", "best-500.pt"]
    best = manager.load_best()
    assert (best.step, best.eval_loss) == (200, 2.5)
    with pytest.raises(ValueError, match="finite"):
        manager.consider(float("nan"), 700, small(700))


def test_manager_recovers_its_index_after_a_crash(tmp_path):
    manager = CheckpointManager(tmp_path, keep_best=2)
    manager.consider(2.0, 10, small(10))
    manager.consider(1.0, 20, small(20))
    os.remove(tmp_path / "best.json")  # crash between writing best-20.pt and the index
    os.remove(tmp_path / "best-10.pt")
    (tmp_path / "best-bogus.pt").write_bytes(b"ignored")

    reopened = CheckpointManager(tmp_path, keep_best=2)

    assert [(loss, step) for loss, step, _ in reopened.best()] == [(1.0, 20)]
    reopened.consider(1.5, 30, small(30))
    reopened.consider(0.5, 40, small(40))
    assert [step for _, step, _ in CheckpointManager(tmp_path, keep_best=2).best()] == [40, 20]
