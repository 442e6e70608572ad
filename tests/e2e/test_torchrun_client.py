"""A site with several workers: `torchrun` + FSDP2 (two CPU ranks, gloo) behind one PS connection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client_agent.data.corpus import stdlib_split, write_file_list
from geofed_apps.launch import child_env, wait_until, write_token
from geofed_testing.procs import PSNode

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
FED = {
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64},
    # 5 rows over 2 ranks in micro-batches of 2: rank 0 holds 2 rows, rank 1 holds 3, yet both must run
    # the same number of passes per step and per evaluation (a per-rank split deadlocked here).
    "training": {"batch_size": 5, "micro_batch_size": 2, "local_steps": 3, "sync_interval_s": 60, "eval_every": 3,
                 "eval_batches": 1, "precision": "fp32"},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "int8"},
}


def _site_command(ps: PSNode, tmp_path: Path, client_id: str, *flags: str) -> list[str]:
    """A 2-rank torchrun client of `client_id` (master token, 20 files of data, work dir `tmp_path/work`)."""
    with ps.admin() as admin:
        token, _ = admin.create_token(client_id, master=True)
    write_token(tmp_path / "token", token)
    data = write_file_list(tmp_path / "data.list", stdlib_split(2).clients[0][:20])
    return [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "client_agent", "--ps", ps.address,
            "--client-id", client_id, "--token-file", str(tmp_path / "token"), "--data", str(data),
            "--work-dir", str(tmp_path / "work"), "--insecure", "--device", "cpu", *flags]


def test_two_rank_fsdp_client_bootstraps_and_syncs(tmp_path):
    ps = PSNode(tmp_path / "ps", FED).start()
    try:
        work = tmp_path / "work"
        out = subprocess.run(_site_command(ps, tmp_path, "site.fsdp", "--max-rounds", "2"), cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, env=child_env())
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in records] == [1, 2]  # one record per sync, written by rank 0 only
        assert all(r["status"] == "APPLIED" and r["payload_bytes"] > 0 for r in records)
        with ps.admin() as admin:
            assert admin.status()["version"] == 3  # Θ0 from the 2-rank master, then its two deltas
        assert out.stderr.count("event=bootstrapped") == 1  # only rank 0 spoke to the PS
    finally:
        ps.kill()


# Short, so the stalls below outlast it; not the settings' minimum (5 s): at 5 s this test failed once in a full
# suite run on a loaded 2-core machine (its log was not kept) and passed 5 times alone; a sync's own collectives
# (the slice-wise checkpoint's barriers) need some slack under load, which is not what this test is about.
PG_TIMEOUT_S = 10.0
STALL_S = 4 * PG_TIMEOUT_S  # from launch: rank 0 reaches Join a few seconds in, then waits out the rest


def _stall(ps: PSNode, seconds: float) -> None:
    """Freeze the PS (SIGSTOP) for `seconds`: connections stay open, nothing is answered."""
    os.killpg(ps.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)  # the length of the outage being simulated, not a wait for a result
    finally:
        os.killpg(ps.pid, signal.SIGCONT)


@pytest.mark.long
def test_a_ps_stalled_longer_than_the_process_group_timeout_is_survived(tmp_path):
    """Rank 0 waits on a frozen PS at Join and again at its second push; rank 1 must outlast both waits."""
    ps = PSNode(tmp_path / "ps", FED).start()
    proc = None
    try:
        work = tmp_path / "work"
        command = _site_command(ps, tmp_path, "site.stall", "--max-rounds", "3",
                                "--process-group-timeout-s", str(PG_TIMEOUT_S))
        log = open(tmp_path / "client.log", "wb")  # noqa: SIM115 - owned by the process
        # Execute: the PS is frozen before the site starts, and again once its first sync is recorded.
        os.killpg(ps.pid, signal.SIGSTOP)
        proc = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=child_env())
        os.killpg(ps.pid, signal.SIGCONT)
        _stall(ps, STALL_S)
        wait_until(lambda: (work / "metrics.jsonl").exists() or proc.poll() is not None, 180, "the first sync")
        _stall(ps, STALL_S)
        rc = proc.wait(timeout=300)

        # Assert: the site finished every round, and its ranks really did wait past their timeout.
        out = (tmp_path / "client.log").read_text(errors="replace")
        assert rc == 0, out[-4000:]
        records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in records] == [1, 2, 3]
        assert all(r["status"] == "APPLIED" for r in records)
        assert out.count("event=bootstrapped") == 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        ps.kill()
