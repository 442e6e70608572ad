"""FSDP2 across two CPU ranks (gloo, torchrun) computes the same delta as one process, even on an uneven batch."""

from __future__ import annotations

import json

import client_fsdp_worker as worker
import pytest
import share_resume_worker
import torch
import uneven_batch_worker
from torchrun_launch import torchrun

STEPS = 4


def test_two_gloo_ranks_match_one_process(tmp_path, monkeypatch):
    # Prepare: one in-process run (world 1) and one torchrun launch of two ranks, same seed and data.
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    worker.run(tmp_path / "one.pt", STEPS)
    proc = torchrun(worker.__file__, str(tmp_path / "two.pt"), str(STEPS), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]

    one = torch.load(tmp_path / "one.pt", weights_only=True)
    two = torch.load(tmp_path / "two.pt", weights_only=True)

    # Assert: the model moved, and both runs moved it the same way (float summation order only).
    assert (one["world"], two["world"]) == (1, 2)
    delta_one, delta_two = one["delta"], two["delta"]
    assert delta_one.abs().max() > 1e-3
    assert (delta_one - delta_two).norm() / delta_one.norm() < 1e-4
    assert (delta_one - delta_two).abs().max() < 1e-5
    assert two["mean_loss"] == pytest.approx(one["mean_loss"], rel=1e-5)
    assert abs(two["eval_loss"] - one["eval_loss"]) < 1e-4
    # Broadcasting a flat model into the shards and reloading the gathered optimizer state resumes exactly.
    assert one["moved"] > 0 and two["moved"] > 0
    assert one["resume_diff"] == 0.0 and two["resume_diff"] == 0.0


def test_uneven_batch_runs_the_same_passes_on_every_rank_with_the_exact_gradient(tmp_path):
    """Batch 5 over 2 ranks in micro-batches of 2: rank 0 has 2 rows, rank 1 has 3, and both finish."""
    # Execute
    proc = torchrun(uneven_batch_worker.__file__, str(tmp_path / "uneven.pt"), cwd=tmp_path)

    # Assert: no hang; rank 0 ran 2 passes of 1 row to match rank 1's 2 + 1; gradients as if unsharded.
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    got = torch.load(tmp_path / "uneven.pt", weights_only=True)
    assert (got["world"], got["plan"], got["steps"], got["captured"]) == (2, [1, 1], 2, 2)
    assert max(got["grad_errors"]) < 1e-5, got["grad_errors"]
    assert got["mean_loss"] == pytest.approx(got["ref_mean_loss"], rel=1e-5)
    assert got["eval_loss"] == pytest.approx(got["ref_eval_loss"], rel=1e-5)
    # The micro-batch probe reserves AdamW memory for this rank's shards only (they add up to the model).
    assert got["reserved"] < got["adamw_full"] and got["reserved_all"] == got["adamw_full"]


def test_only_rank_zero_reads_the_checkpoint_and_every_rank_resumes(tmp_path, monkeypatch):
    """A multi-node site: `latest.pt` is on rank 0's node only; rank 1 resumes from what rank 0 shares."""
    # Prepare: a one-process checkpoint (3 steps, optimizer state, position, private state).
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    share_resume_worker.write_checkpoint(tmp_path / "ckpt")

    # Execute
    proc = torchrun(share_resume_worker.__file__, "run", str(tmp_path / "ckpt"), str(tmp_path / "seen"), cwd=tmp_path)

    # Assert: both ranks saw the same resume state, and one more step matches the one-process resume.
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    zero, one = (json.loads((tmp_path / f"seen.{r}.json").read_text()) for r in (0, 1))
    assert zero == one
    assert (one["step"], one["base_version"], one["private"]) == (3, 5, {"adapter.a": [[0, 1, 2], [3, 4, 5]]})
    assert float((tmp_path / "seen.diff").read_text()) < 1e-5
