"""Start a sharded PS on this machine: one front `geofed ps --shard-role front` on the clients' port
and one `geofed ps --shard-role shard` per shard, all sharing one peer secret (a 0600 file).

`geofed local --ps-shards N`, the sharded-PS tests and `bench/ps_shards_bench.py` start it through here.
The global model lives in the shards' checkpoint directories, one slice each; `newest` puts the newest
version every shard holds back together (for evaluation), in shard order.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np

from ps_server.checkpoint import CheckpointStore, PSCheckpoint

from .launch import PSProcess, free_port, write_token


class ShardedPS:
    """A front `PSProcess` plus one `PSProcess` per shard, in `workdir/front` and `workdir/shard-<i>`."""

    def __init__(self, workdir: Path, fed_file: Path, shards: int, *, extra: list[str] | None = None,
                 logs: Path | None = None) -> None:
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.peer_token = write_token(workdir / "peer.token", "peer-" + secrets.token_urlsafe(32))
        peer = ["--peer-token-file", str(self.peer_token)]
        self.shards: list[PSProcess] = []
        for i in range(shards):
            ps = PSProcess(workdir / f"shard-{i}", fed_file, extra=[
                "--shard-role", "shard", "--shard-index", str(i), *peer, *(extra or [])],
                log=(logs / f"ps-shard-{i}.log") if logs else None)  # fmt: skip
            ps.port = free_port()
            self.shards.append(ps)
        addresses = ",".join(s.address for s in self.shards)
        self.front = PSProcess(workdir / "front", fed_file, extra=[
            "--shard-role", "front", "--shard-addresses", addresses, *peer, *(extra or [])],
            log=(logs / "ps.log") if logs else None)  # fmt: skip

    @property
    def all(self) -> list[PSProcess]:
        return [self.front, *self.shards]

    def start(self, timeout: float = 60.0) -> ShardedPS:
        for ps in self.shards:
            ps.start(timeout)
        self.front.start(timeout)
        return self

    def newest(self) -> PSCheckpoint | None:
        return newest_sharded([s.ckpt_dir for s in self.shards])


def newest_sharded(shard_dirs: list[Path]) -> PSCheckpoint | None:
    """The newest version every shard has checkpointed, its slices concatenated in shard order (None: no model)."""
    stores = [CheckpointStore(d) for d in shard_dirs]
    versions = [{int(p.name[4:16]) for p in s.files()} for s in stores]
    common = set.intersection(*versions) if versions else set()
    if not common:
        return None
    version = max(common)
    parts = [CheckpointStore.load(s.dir / f"ps-v{version:012d}.safetensors") for s in stores]
    parts.sort(key=lambda c: int(c.aggregator["lo"]))
    flat = np.concatenate([c.flat for c in parts])
    manifest = tuple(t for c in parts for t in c.manifest)
    return PSCheckpoint(version, flat, manifest, {}, {})
