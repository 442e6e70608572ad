"""FSDP2 across two CPU ranks (gloo, torchrun) computes the same delta as one process."""

from __future__ import annotations

import os
import subprocess
import sys

import client_fsdp_worker as worker
import pytest
import torch

STEPS = 4


def test_two_gloo_ranks_match_one_process(tmp_path, monkeypatch):
    # Prepare: one in-process run (world 1) and one torchrun launch of two ranks, same seed and data.
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    worker.run(tmp_path / "one.pt", STEPS)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # cwd outside the repository: its `operator/` folder would shadow the stdlib module in the launcher.
    proc = subprocess.run(
        [*launch, worker.__file__, str(tmp_path / "two.pt"), str(STEPS)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
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
