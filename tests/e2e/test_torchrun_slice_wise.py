"""A multi-rank site syncs slice-wise (issue 18): each rank diffs, encodes and checkpoints its own slice.

Real processes: a PS and a `torchrun` client of gloo CPU ranks. The model's flat vector (~3.2M elements)
spans four codec frames, so every rank owns frames of its own (two each on two ranks; 2, 1, 1 on three)
and the other ranks' frames reach the PS through rank 0's relay. The site is then relaunched on three
ranks and on one, and each restores the sharded checkpoint written before (DCP reshards it) and trains on
from its step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from client_agent.data.corpus import stdlib_split, write_file_list
from client_agent.training.slices.partition import FlatPartition
from geofed.codec.base import DEFAULT_FRAME_ELEMS
from geofed_apps.launch import child_env, write_token
from geofed_apps.shards import ShardedPS
from geofed_testing.procs import PSNode

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
FED = {
    "model": {"n_layer": 4, "n_head": 4, "n_embd": 256, "block_size": 32},
    "training": {"batch_size": 3, "local_steps": 2, "sync_interval_s": 60, "eval_every": 2, "eval_batches": 1,
                 "precision": "fp32"},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "int8"},
}


def _site(ps, tmp_path: Path, nproc: int, rounds: int) -> subprocess.CompletedProcess:
    """`nproc` ranks of the site `site.shards` (master), work dir `tmp_path/work`, for `rounds` more syncs."""
    data = write_file_list(tmp_path / "data.list", stdlib_split(2).clients[0][:20])
    command = [TORCHRUN, "--standalone", "--nproc-per-node", str(nproc), "-m", "client_agent", "--ps", ps.address,
               "--client-id", "site.shards", "--token-file", str(tmp_path / "token"), "--data", str(data),
               "--work-dir", str(tmp_path / "work"), "--insecure", "--device", "cpu", "--max-rounds", str(rounds)]
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=400,
                         env={**child_env(), "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    return out


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.long
def test_a_site_syncs_slice_wise_and_restores_on_other_rank_counts(tmp_path):
    ps = PSNode(tmp_path / "ps", FED).start()
    try:
        with ps.admin() as admin:
            token, _ = admin.create_token("site.shards", master=True)
        write_token(tmp_path / "token", token)

        # Two ranks: Θ0 and two deltas, all slice by slice.
        out = _site(ps, tmp_path, 2, rounds=2)
        assert "event=sync_path client=site.shards slice_wise=True ranks=2" in out.stderr
        assert out.stderr.count("event=bootstrapped") == 1 and "slice_wise=True" in out.stderr
        first = _records(tmp_path)
        assert [r["status"] for r in first] == ["APPLIED", "APPLIED"]
        assert all(0 < r["ratio"] < 0.3 for r in first)  # int8 + Huffman: under a quarter of fp32's bytes
        pointer = json.loads((tmp_path / "work" / "checkpoints-sharded" / "latest.json").read_text())
        for world in (2, 3):  # every rank has frames to send, so the relay is exercised
            assert all(b > a for a, b in FlatPartition.for_codec(pointer["numel"], world, DEFAULT_FRAME_ELEMS).ranges())
        assert pointer["world"] == 2 and pointer["meta"]["step"] == first[-1]["step"]
        # Written just before its push: the push's residual is staged, and the upload kept for a resend.
        assert pointer["residual"] == ["residual", "staged"] and pointer["meta"]["upload"] == "upload.bin"
        assert not (tmp_path / "work" / "checkpoints" / "latest.pt").exists()  # nothing gathered on rank 0
        with ps.admin() as admin:
            assert admin.status()["version"] == 3

        # Three ranks restore what two wrote, and train on from its step (no second bootstrap).
        out = _site(ps, tmp_path, 3, rounds=1)
        assert f"event=sharded_checkpoint_restored rank=0 world=3 step={first[-1]['step']}" in out.stderr
        assert "event=sharded_checkpoint_restored rank=2 world=3" in out.stderr
        assert "event=bootstrapped" not in out.stderr
        assert "status=DUPLICATE" in out.stderr  # the saved upload is resent: the PS had it already
        third = _records(tmp_path)[-1]
        assert third["status"] == "APPLIED" and third["step"] == first[-1]["step"] + FED["training"]["local_steps"]
        assert json.loads((tmp_path / "work" / "checkpoints-sharded" / "latest.json").read_text())["world"] == 3

        # One rank: the sharded checkpoint keeps it on the slice-wise path, the whole vector in one slice (and off
        # the overlapped path, which the defaults ask for).
        out = _site(ps, tmp_path, 1, rounds=1)
        assert ("slice_wise=True ranks=1 reason='overlap_sync not taken: the overlapped path holds the whole vector; "
                "one rank resuming a sharded checkpoint") in out.stderr
        assert f"event=sharded_checkpoint_restored rank=0 world=1 step={third['step']}" in out.stderr
        last = _records(tmp_path)[-1]
        assert last["status"] == "APPLIED" and last["step"] == third["step"] + FED["training"]["local_steps"]
        with ps.admin() as admin:
            assert admin.status()["version"] == 5
    finally:
        ps.kill()


@pytest.mark.long
def test_a_slice_wise_site_pushes_to_a_sharded_ps(tmp_path):
    """Two ranks against a PS of two shards: every rank's frames must also end at the PS's shard bound (the
    front refuses a frame that crosses one), learnt by rank 0 at Join and passed to every rank."""
    fed_file = tmp_path / "federation.yaml"
    fed_file.write_text(yaml.safe_dump({**FED, "ps_shards": 2}))
    ps = ShardedPS(tmp_path / "ps", fed_file, 2)
    try:
        ps.start()
        with ps.front.admin() as admin:
            token, _ = admin.create_token("site.shards", master=True)
        write_token(tmp_path / "token", token)
        out = _site(ps.front, tmp_path, 2, rounds=2)
        assert "event=sync_path client=site.shards slice_wise=True ranks=2" in out.stderr
        assert [r["status"] for r in _records(tmp_path)] == ["APPLIED", "APPLIED"]
        with ps.front.admin() as admin:
            assert admin.status()["version"] == 3
        assert ps.newest().version == 3  # both shards committed both deltas
    finally:
        for p in ps.all:
            p.kill()


@pytest.mark.long
def test_an_empty_ps_is_reseeded_from_the_sites_sharded_checkpoint(tmp_path):
    """Total PS loss (paper §III-B4): the master site, relaunched against a new empty PS, streams the model of
    its sharded checkpoint slice by slice, at that checkpoint's base version. The reference is read from the
    checkpoint with torch's own DCP reader, not with the agent's code."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from ps_server.checkpoint import CheckpointStore

    ps1 = PSNode(tmp_path / "ps1", FED).start()
    try:
        with ps1.admin() as admin:
            write_token(tmp_path / "token", admin.create_token("site.shards", master=True)[0])
        _site(ps1, tmp_path, 2, rounds=2)
    finally:
        ps1.kill()
    pointer = json.loads((tmp_path / "work" / "checkpoints-sharded" / "latest.json").read_text())
    dcp_to_torch_save(tmp_path / "work" / "checkpoints-sharded" / pointer["dir"], tmp_path / "saved.pt")
    saved = torch.load(tmp_path / "saved.pt", weights_only=True)["model"]

    ps2 = PSNode(tmp_path / "ps2", FED).start()
    try:
        with ps2.admin() as admin:
            write_token(tmp_path / "token", admin.create_token("site.shards", master=True)[0])
        out = _site(ps2, tmp_path, 2, rounds=1)
        assert "reseed=True slice_wise=True" in out.stderr
        files = CheckpointStore(ps2.ckpt_dir, keep=1000).files()  # newest first: the last is the re-seed
        first = CheckpointStore.load(files[-1])
        assert first.version == pointer["meta"]["base_version"] == 2  # round 2 trained from v2 (its push made v3)
        want = np.concatenate([saved[t.name].reshape(-1).numpy() for t in first.manifest])
        np.testing.assert_array_equal(first.flat, want)
        with ps2.admin() as admin:
            assert admin.status()["version"] == 3  # and the federation trained on from it
    finally:
        ps2.kill()
