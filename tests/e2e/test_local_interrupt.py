"""Ctrl-C in `geofed local` keeps what was trained: the PS's final checkpoint, exported as `final_model/`."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import torch

from geofed_testing.local_run import GEOFED
from ps_server.checkpoint import CheckpointStore


@pytest.mark.long
def test_ctrl_c_saves_and_exports_the_global_model_prints_the_summary_and_exits_130(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Prepare: a federation meant to run for minutes, in its own process group as a terminal's foreground job.
    proc = subprocess.Popen([GEOFED, "local", "--clients", "2", "--duration", "300", "--run-dir", str(tmp_path),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob("*/ps/ps-v000000000002.safetensors")):  # a trained version exists
            assert proc.poll() is None and time.monotonic() < deadline, "no trained global version appeared"
            time.sleep(0.2)

        # Execute: Ctrl-C, which the terminal sends to the whole foreground process group.
        os.killpg(proc.pid, signal.SIGINT)
        stdout, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    # Assert
    assert proc.returncode == 130, stdout[-3000:]
    assert "interrupted: stopping the clients" in stdout
    run = next(tmp_path.iterdir())
    ckpt = CheckpointStore(run / "ps").load_latest()
    assert ckpt.version >= 2
    assert f"global version {ckpt.version}, " in stdout and "(interrupted after" in stdout, stdout
    assert f"run directory: {run}" in stdout
    assert "eval loss: " in stdout
    model = AutoModelForCausalLM.from_pretrained(run / "final_model")
    wte = ckpt.flat[: model.transformer.wte.weight.numel()]
    assert torch.equal(model.transformer.wte.weight.detach().reshape(-1), torch.from_numpy(wte))
    assert AutoTokenizer.from_pretrained(run / "final_model").encode("é") == [195, 169]
    assert (run / "metrics.jsonl").stat().st_size > 0
