"""The sparse mode end to end (issue 16): `geofed local --set codec.name=sparse` trains with sparse pushes and a
sparse model stream; a client SIGKILLed mid-run is relaunched and gets its error-feedback state back."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from client_agent.data.corpus import stdlib_split, write_file_list
from client_agent.training.checkpoint import CheckpointManager
from geofed_apps.launch import start_client, stop, wait_until
from geofed_testing.local_run import run_local
from geofed_testing.procs import PSNode


@pytest.mark.slow
def test_geofed_local_sparse_runs_end_to_end(tmp_path):
    out = run_local(tmp_path, "--clients", "2", "--duration", "180", "--set", "codec.name=sparse",
                    "--set", "training.local_steps=20", "--set", "training.max_steps=60", timeout=300)
    assert out.first_loss is not None and out.last_loss < out.first_loss - 0.25, out.stdout[-2000:]  # 3 syncs
    run = out.run_dir
    for i in range(2):
        log = (run / "logs" / f"client-{i}.log").read_text()
        received = re.findall(r"event=model_received version=(\d+) encoding=(\S+) bytes=(\d+)", log)
        assert received[0][1] == "fp32"  # the first model is whole; every later one comes as increments
        assert any(enc == "sparse_delta" for _, enc, _ in received[1:]), received
        assert "TransferRestart" not in log and "sha256 check" not in log  # each rebuilt version was exact
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"codec"' in line]
    assert records and all(r["codec"] == "sparse/c4096k82v2+rice" for r in records)
    assert all(r["payload_bytes"] * 100 < 4 * 446_848 for r in records)  # the 2x128 model: > 100x below fp32


FED = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 64, "block_size": 64},
    "training": {"batch_size": 4, "local_steps": 5, "sync_interval_s": 3, "eval_every": 1000, "eval_batches": 1},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "sparse", "error_feedback_decay": 0.9},
}


def _syncs(work: Path) -> int:
    path = work / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_preempted_client_rejoins_with_its_error_feedback_state(tmp_path):
    ps = PSNode(tmp_path / "ps", FED).start()
    split = stdlib_split(2)
    lists = [write_file_list(tmp_path / f"client-{i}.list", files[:40]) for i, files in enumerate(split.clients)]
    procs: list[subprocess.Popen] = []

    def client(i: int, token: str, log: str) -> subprocess.Popen:
        return start_client(token, tmp_path / f"token-{i}", tmp_path / log, ps=ps.address, client_id=f"t.c{i}",
                            data=lists[i], work_dir=tmp_path / f"work-{i}", seed=i)

    try:
        with ps.admin() as admin:
            tokens = [admin.create_token(f"t.c{i}", master=(i == 0))[0] for i in range(2)]
        procs += [client(i, tokens[i], f"client-{i}.log") for i in range(2)]
        work = tmp_path / "work-1"
        wait_until(lambda: _syncs(work) >= 2, 180, "client 1 syncing twice", period=0.3)
        procs[1].send_signal(signal.SIGKILL)  # preempted: no goodbye
        procs[1].wait(10)

        saved = CheckpointManager(work / "checkpoints").load_latest()  # what the relaunch must resume from
        residual = saved.residual["residual"].numpy()
        assert np.count_nonzero(residual) > 0.5 * residual.size  # top-k left most of the delta in the residual
        digest = hashlib.sha256(residual.astype(np.float32).tobytes()).hexdigest()

        with ps.admin() as admin:
            fresh = admin.create_token("t.c1")[0]
        before = _syncs(work)
        procs.append(client(1, fresh, "client-1-relaunched.log"))
        wait_until(lambda: _syncs(work) > before, 180, "the relaunched client syncing", period=0.3)
        log = (tmp_path / "client-1-relaunched.log").read_text()
        restored = re.search(r"event=error_feedback_restored client=t\.c1 residual_sha256=(\w+)", log)
        assert restored and restored.group(1) == digest, log[-2000:]

        def taken_after_relaunch() -> list[dict]:
            records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()[before:]]
            return [r for r in records if r["status"] in ("ACCEPTED", "APPLIED")]

        wait_until(taken_after_relaunch, 180, "a sparse push of the relaunched client taken", period=0.3)
        assert all(r["codec"].startswith("sparse/") for r in taken_after_relaunch())
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
        ps.kill()
