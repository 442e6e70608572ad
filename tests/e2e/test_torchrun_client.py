"""A site with several workers: `torchrun` + FSDP2 (two CPU ranks, gloo) behind one PS connection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from client_agent.corpus import stdlib_split, write_file_list
from geofed_apps.launch import child_env, write_token
from geofed_testing.procs import PSNode

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
FED = {
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64},
    "training": {"batch_size": 4, "local_steps": 3, "sync_interval_s": 60, "eval_every": 3, "eval_batches": 1,
                 "precision": "fp32"},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "int8"},
}


def test_two_rank_fsdp_client_bootstraps_and_syncs(tmp_path):
    ps = PSNode(tmp_path / "ps", FED).start()
    try:
        with ps.admin() as admin:
            token, _ = admin.create_token("site.fsdp", master=True)
        write_token(tmp_path / "token", token)
        data = write_file_list(tmp_path / "data.list", stdlib_split(2).clients[0][:20])
        work = tmp_path / "work"
        out = subprocess.run(
            [TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "client_agent", "--ps", ps.address,
             "--client-id", "site.fsdp", "--token-file", str(tmp_path / "token"), "--data", str(data),
             "--work-dir", str(work), "--insecure", "--max-rounds", "2", "--device", "cpu"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env=child_env(),
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in records] == [1, 2]  # one record per sync, written by rank 0 only
        assert all(r["status"] == "APPLIED" and r["payload_bytes"] > 0 for r in records)
        with ps.admin() as admin:
            assert admin.status()["version"] == 3  # Θ0 from the 2-rank master, then its two deltas
        assert out.stderr.count("event=bootstrapped") == 1  # only rank 0 spoke to the PS
    finally:
        ps.kill()
