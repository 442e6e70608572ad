"""Sharded PS logic without sockets: shard map, frame routing, two-phase commit, replay after a restart.

The reference is the single-PS path (`Aggregator` fed by `PushReceiver`), which shares no code with the
shard machinery beyond the strategy itself: a sharded federation must publish the same model.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from geofed.codec import make_codec
from geofed.codec.header import FRAME_PREFIX
from geofed.config import FederationConfig
from geofed.manifest import TensorEntry
from geofed.shard_map import ShardMap, ShardMapError, split_manifest
from ps_server.aggregation.aggregator import Aggregator
from ps_server.errors import InvalidPush, StaleDelta
from ps_server.global_model import GlobalModel
from ps_server.ingest import PushHeader, PushReceiver
from ps_server.shards.engine import ShardedEngine, ShardedReceiver
from ps_server.shards.errors import ShardRefused, ShardUnavailable
from ps_server.shards.link import LocalLink
from ps_server.shards.router import FrameRouter
from ps_server.shards.shard import ShardCore
from ps_server.status_table import format_status

MANIFEST = (TensorEntry("a", (40, 10), "float32"), TensorEntry("b", (300,), "float32"),
            TensorEntry("c", (7, 50), "float32"), TensorEntry("d", (250,), "float32"))
NUMEL = 400 + 300 + 350 + 250
FRAME = 128


def fed(**agg) -> FederationConfig:
    return FederationConfig.model_validate({"aggregation": {"mode": "async", "buffer_size": 2,
                                                            "outer_optimizer": "nesterov", **agg}})


def test_split_manifest_on_tensor_boundaries_and_refusals():
    m = split_manifest(MANIFEST, 2)
    assert m.bounds == (0, 700, NUMEL)  # 700 is the tensor boundary nearest 650
    assert split_manifest(MANIFEST, 4).bounds == (0, 400, 700, 1050, NUMEL)
    assert m.owner(0) == 0 and m.owner(699) == 0 and m.owner(700) == 1 and m.owner(NUMEL - 1) == 1
    with pytest.raises(ShardMapError, match="too few for 5 PS shards"):
        split_manifest(MANIFEST, 5)
    with pytest.raises(ShardMapError, match="strictly increase"):
        ShardMap((0, 10, 10))
    assert split_manifest(MANIFEST, 2).digest != split_manifest(MANIFEST, 4).digest


def encode(values: np.ndarray, codec: str, cuts=()) -> tuple[bytes, list[bytes]]:
    header, frames = make_codec(codec).encode(values, frame_elems=FRAME, cuts=cuts)
    return header, list(frames)


def test_router_refuses_a_frame_crossing_a_shard_boundary():
    smap = split_manifest(MANIFEST, 2)
    header, frames = encode(np.ones(NUMEL, np.float32), "int8")  # cut for a single PS: 640..768 crosses 700
    router = FrameRouter(smap, header)
    with pytest.raises(InvalidPush, match="crosses the boundary of PS shard 0 at element 700"):
        for f in frames:
            list(router.feed(f))


def test_router_routes_by_offset_and_cuts_the_fp32_initial_model():
    smap = split_manifest(MANIFEST, 2)
    x = np.arange(NUMEL, dtype=np.float32)
    header, frames = encode(x, "fp32")
    router = FrameRouter(smap, header, init=True)
    routed = [r for r in router.feed(b"".join(frames))]
    router.finish()
    spans = [(s, *FRAME_PREFIX.unpack_from(f)[2:]) for s, f in routed]
    assert (0, 640, 60) in spans and (1, 700, 68) in spans  # the frame [640, 768) cut at 700
    assert all(smap.owner(off) == s and off + n <= smap.bounds[s + 1] for s, off, n in spans)
    back = np.concatenate([np.frombuffer(f[FRAME_PREFIX.size:], "<f4") for _, f in routed])
    np.testing.assert_array_equal(back, x)  # bytes sliced, not changed


class Front:
    """A front over in-process shards, driven like the gRPC layer drives it."""

    def __init__(self, tmp_path, cfg: FederationConfig, shards: int) -> None:
        self.cfg, self.tmp = cfg, tmp_path
        self.cores = [self.new_core(i) for i in range(shards)]
        self.link = LocalLink(self.cores)
        self.agg = self.new_front()

    def new_front(self) -> Aggregator:
        """The front's one Aggregator, its rounds on the shards."""
        engine = ShardedEngine(self.cfg, self.link, self.tmp)
        return Aggregator(self.cfg, engine.model, engine=engine)

    def new_core(self, i: int) -> ShardCore:
        core = ShardCore(self.cfg, i, self.tmp / f"shard{i}")
        core.resume()
        return core

    def restart(self, i: int) -> None:
        self.cores[i] = self.link.cores[i] = self.new_core(i)

    def push(self, client: str, values: np.ndarray, *, base: int, codec: str = "int8", init: bool = False,
             upload: str | None = None, shard_map: bytes | None = None):
        smap = self.agg.engine.shard_map
        header, frames = encode(values, "fp32" if init else codec, () if init else smap.cuts)
        payload = b"".join(frames)
        digest = smap.digest if shard_map is None and smap else shard_map
        h = PushHeader(base, upload or f"{client}-{base}", header, len(payload), num_tokens=100, local_steps=1,
                       init=init, manifest=MANIFEST if init else (), shard_map=digest or b"")
        r = ShardedReceiver(self.agg.engine, client_id=client, max_upload_bytes=1 << 30, max_init_numel=1 << 30)
        try:
            r.on_header(h)
            for at in range(0, len(payload), 1000):
                r.on_payload(at, payload[at : at + 1000])
            push = r.on_trailer(hashlib.sha256(payload).digest())
        except Exception:
            r.abort()
            raise
        return self.agg.initialise(push) if init else self.agg.submit(push)

    def model(self) -> np.ndarray:
        v = self.agg.model.version
        return np.concatenate([c.read(v).flat for c in self.cores])


class Single:
    """The reference: the single PS's aggregator (its rounds in process)."""

    def __init__(self, cfg: FederationConfig) -> None:
        self.model = GlobalModel()
        self.agg = Aggregator(cfg, self.model)

    def push(self, client: str, values: np.ndarray, *, base: int, codec: str = "int8", init: bool = False,
             upload: str | None = None):
        header, frames = encode(values, "fp32" if init else codec)
        payload = b"".join(frames)
        h = PushHeader(base, upload or f"{client}-{base}", header, len(payload), num_tokens=100, local_steps=1,
                       init=init, manifest=MANIFEST if init else ())
        r = PushReceiver(client_id=client, expected_numel=None if init else NUMEL, max_upload_bytes=1 << 30,
                         max_init_numel=1 << 30)
        r.on_header(h)
        r.on_payload(0, payload)
        push = r.on_trailer(hashlib.sha256(payload).digest())
        return self.agg.initialise(push) if init else self.agg.submit(push)


def run_rounds(target, deltas, theta0):
    target.push("m", theta0, base=0, init=True)
    for rnd, pair in enumerate(deltas):
        for k, d in enumerate(pair):
            target.push(f"c{k}", d, base=rnd + 1)


@pytest.mark.parametrize("shards", [2, 4])
def test_sharded_rounds_publish_the_single_ps_model(tmp_path, shards):
    rng = np.random.default_rng(1)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    deltas = [[(rng.standard_normal(NUMEL) * 1e-3).astype(np.float32) for _ in range(2)] for _ in range(3)]
    front, single = Front(tmp_path, fed(), shards), Single(fed())
    run_rounds(front, deltas, theta0)
    run_rounds(single, deltas, theta0)
    assert front.agg.model.version == single.model.version == 4
    ref = single.model.current()
    np.testing.assert_array_equal(front.model(), ref.flat)
    assert front.agg.model.current().sha256 == ref.sha256  # the digest clients check, over the whole vector


def test_killed_shard_mid_round_is_replayed_and_loses_nothing(tmp_path):
    rng = np.random.default_rng(2)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    d1, d2 = [(rng.standard_normal(NUMEL) * 1e-3).astype(np.float32) for _ in range(2)]
    front, single = Front(tmp_path, fed(), 2), Single(fed())
    run_rounds(single, [[d1, d2]], theta0)
    front.push("m", theta0, base=0, init=True)
    assert front.push("c0", d1, base=1).status == "ACCEPTED"
    front.link.down.add(1)  # shard 1 killed mid-round: its open round's sum is gone
    with pytest.raises(ShardUnavailable):  # a push needing it is refused whole (the client retries it)
        front.push("c1", d2, base=1)
    assert front.agg.model.version == 1
    front.link.down.discard(1)
    front.restart(1)  # from its checkpoint and the staged pushes on its disk
    assert front.push("c1", d2, base=1).status == "APPLIED"  # c0's fold replayed on shard 1, then c1's
    np.testing.assert_array_equal(front.model(), single.model.current().flat)


def test_shard_killed_between_prepare_and_commit_publishes_nothing_half(tmp_path):
    rng = np.random.default_rng(3)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    d1, d2 = [(rng.standard_normal(NUMEL) * 1e-3).astype(np.float32) for _ in range(2)]
    front, single = Front(tmp_path, fed(), 2), Single(fed())
    run_rounds(single, [[d1, d2]], theta0)
    front.push("m", theta0, base=0, init=True)
    front.push("c0", d1, base=1)
    real_commit = front.link.commit

    def commit_then_die(i, version):
        if i == 1:
            front.link.down.add(1)
        return real_commit(i, version)

    front.link.commit = commit_then_die
    assert front.push("c1", d2, base=1).status == "ACCEPTED"  # prepared everywhere, committed on shard 0 only
    assert front.agg.model.version == 1  # version 2 is not published while shard 1 lacks it
    assert front.cores[0].model.version == 2 and front.cores[1].model.version == 1
    front.link.commit = real_commit
    front.link.down.discard(1)
    front.restart(1)  # finds its prepared slice of version 2 on disk
    assert front.agg.tick() is not None
    assert front.agg.model.version == 2
    np.testing.assert_array_equal(front.model(), single.model.current().flat)


def test_stale_shard_map_and_foreign_slice_are_refused(tmp_path):
    rng = np.random.default_rng(4)
    front = Front(tmp_path, fed(), 2)
    front.push("m", rng.standard_normal(NUMEL).astype(np.float32), base=0, init=True)
    stale = split_manifest(MANIFEST, 4).digest
    header = PushHeader(1, "u1", b"", 10, shard_map=stale)
    out = front.agg.precheck("c0", header, master=False)  # before the payload crosses the WAN
    assert out.status == "STALE" and "another PS shard map" in out.message and "[0, 700, 1300]" in out.message
    with pytest.raises(StaleDelta, match="another PS shard map"):  # and if it were sent anyway
        front.push("c0", np.zeros(NUMEL, np.float32), base=1, shard_map=stale)
    assert front.agg.guard.round_base == {}  # nothing of it was admitted
    header, frames = encode(np.zeros(NUMEL, np.float32), "int8", front.agg.engine.shard_map.cuts)
    with pytest.raises(ShardRefused, match=r"owns \[700, 1300\), not \[0, 700\)"):
        front.cores[1].stage("x", header, frames, init=False, lo=0, hi=700)
    with pytest.raises(ShardRefused, match="outside this shard's slice"):
        front.cores[1].stage("y", header, frames, init=False, lo=700, hi=NUMEL)


def test_shards_disagreeing_on_the_version_are_refused_not_published(tmp_path):
    rng = np.random.default_rng(5)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    front = Front(tmp_path, fed(buffer_size=1), 2)
    front.push("m", theta0, base=0, init=True)
    front.push("c0", (rng.standard_normal(NUMEL) * 1e-3).astype(np.float32), base=1)
    assert front.agg.model.version == 2
    for p in (tmp_path / "shard1").glob("ps-v000000000002.safetensors"):
        p.unlink()  # shard 1 comes back holding version 1 only (its newest checkpoint was lost)
    front.restart(1)
    with pytest.raises(ShardUnavailable, match="shard 1 holds version 1, the federation's committed version is 2"):
        front.push("c1", (rng.standard_normal(NUMEL) * 1e-3).astype(np.float32), base=2)
    assert front.agg.model.version == 2 and front.cores[0].model.version == 2
    table = format_status({"has_model": True, "shards": front.agg.engine.shard_status()}, [])
    row = next(line for line in table.splitlines() if line.startswith("1 "))
    assert "shard 1 holds version 1, the federation's committed version is 2" in row  # geofed status says why


def test_a_stage_stream_ends_even_when_the_shard_is_behind():
    """The end of a push's frames reaches the shard when its queue is full (a dropped end hung the shard)."""
    import queue
    import threading

    from ps_server.shards.shard_grpc import _GrpcStage

    got: list = []

    class Call:  # the shard's side: consumes slowly until the end marker, then answers
        def __init__(self, q) -> None:
            self.q, self.ended = q, threading.Event()
            threading.Thread(target=self.consume, daemon=True).start()

        def consume(self) -> None:
            while (item := self.q.get()) is not _GrpcStage._END:
                got.append(item)
                threading.Event().wait(0.05)
            self.ended.set()

        def done(self) -> bool:
            return self.ended.is_set()

        def result(self):
            assert self.ended.wait(3), "the shard never saw the end of the push's frames"
            return type("Reply", (), {"sq_norm": float(len(got)), "sketch": []})()

    stage = _GrpcStage.__new__(_GrpcStage)
    stage.i, stage.q = 0, queue.Queue(maxsize=2)
    stage.future = Call(stage.q)
    for k in range(6):
        stage.send(b"frame%d" % k)
    assert stage.finish().sq_norm == 6.0 and got == [b"frame%d" % k for k in range(6)]


def test_a_restarted_front_leaves_no_staged_push_behind(tmp_path):
    """A front restart forgets its open round (clients resend what was accepted but not applied); the
    shards' staged files of that round must go at the next sync, and the push being received then stays."""
    rng = np.random.default_rng(4)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    d1, d2 = [(rng.standard_normal(NUMEL) * 1e-3).astype(np.float32) for _ in range(2)]
    front = Front(tmp_path, fed(), 2)
    front.push("m", theta0, base=0, init=True)
    assert front.push("c0", d1, base=1).status == "ACCEPTED"
    staged = [sorted((tmp_path / f"shard{i}" / "staged").glob("*.bin")) for i in range(2)]
    assert all(len(files) == 1 for files in staged)  # c0's slice on each shard, folded into the open round

    front.agg = front.new_front()  # the front restarts
    assert front.agg.engine.load_state()
    assert front.push("c1", d2, base=1).status == "ACCEPTED"  # a new round: c0's fold is gone with the old front
    after = [sorted((tmp_path / f"shard{i}" / "staged").glob("*.bin")) for i in range(2)]
    assert all(len(files) == 1 for files in after)
    assert all(a[0] != b[0] for a, b in zip(staged, after, strict=True))  # c0's files deleted, c1's kept
    assert all(json_sidecar.exists() for files in after for json_sidecar in [files[0].with_suffix(".json")])
