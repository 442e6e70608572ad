"""Issue 10 over the wire: one client holding one valid token attacks a real `geofed ps` with DEFAULT settings.

For each delta codec (fp32, int8) and each outer step (FedAvg, Nesterov, Adam), three honest clients push
rounds; the attacker sends each attack of the issue as raw PushDelta messages (it chooses every header field),
then the honest clients push on. Every published model must be finite, and no version may move further than
`BOUND` × the largest step an honest delta caused in the same run: the norm bound clips a delta to 3 × the
median honest norm, and momentum treats a clipped attack like any honest delta (measured in process in
tests/ps/test_aggregation_guard_unit.py: at most 2.9 × for FedAvg, 2.3 × Nesterov, 0.5 × Adam).
Refusals carry a specific status, count in `geofed_rejected_pushes` by reason and leave the model byte for
byte as it was.
"""

from __future__ import annotations

import hashlib
import re
import time
import urllib.request

import grpc
import numpy as np
import pytest

from geofed.codec import make_codec
from geofed.config import ModelConfig, TrainingConfig
from geofed.protocol import geofed_pb2 as pb
from geofed_testing.ledger import delta_for
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import NUMEL, Observer, init_model, join, push, raw_push, raw_session, rpc_code

BOUND = 4.0
MAX_TOKENS = 2**64 - 1
# What an honest client that finishes its H local steps declares (default settings): H and batch × block × H tokens
H = TrainingConfig().local_steps
FULL_SYNC = TrainingConfig().batch_size * ModelConfig().block_size * H
COMBOS = [(codec, outer) for codec in ("fp32", "int8") for outer in ("fedavg", "nesterov", "adam")]


def alternating(value: float) -> np.ndarray:
    return np.where(np.arange(NUMEL) % 2, value, -value).astype(np.float32)


def attack_messages(
    values: np.ndarray,
    *,
    codec: str,
    base: int,
    upload: str,
    tokens: int = MAX_TOKENS,
    frame_elems: int = 1 << 20,
    encoder=None,
    cuts: tuple[int, ...] = (),
    shard_map: bytes = b"",
) -> list[pb.DeltaChunk]:
    """A PushDelta whose every header field the attacker chose (tokens, local steps, frame size); `encoder`, a
    codec object, instead of `codec`'s default one (the sparse codec takes the federation's parameters);
    `cuts` and `shard_map`: a sharded PS's shard bounds and the map its Join named."""
    encoder = encoder or make_codec(codec)
    header, frames = encoder.encode(np.ascontiguousarray(values), frame_elems=frame_elems, cuts=cuts)
    payload = b"".join(frames)
    h = pb.DeltaHeader(
        base_version=base,
        upload_id=upload,
        codec_header=header,
        payload_bytes=len(payload),
        num_tokens=tokens,
        num_samples=tokens,
        local_steps=2**32 - 1,
        shard_map=shard_map,
    )
    msgs = [pb.DeltaChunk(header=h)]
    msgs += [
        pb.DeltaChunk(payload=pb.DeltaPayload(offset=o, data=payload[o : o + 65536]))
        for o in range(0, len(payload), 65536)
    ]
    msgs.append(pb.DeltaChunk(trailer=pb.DeltaTrailer(sha256=hashlib.sha256(payload).digest())))
    return msgs


def rejected(ps: PSNode, reason: str) -> float:
    """`geofed_rejected_pushes` for one reason, scraped from the PS."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ps.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf'^geofed_rejected_pushes_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


class Arena:
    """A PS with default settings (but the outer step), a master, three honest clients and a raw attacker."""

    def __init__(self, ps: PSNode, codec: str, reaper: Reaper) -> None:
        self.ps, self.codec = ps, codec
        master = join(ps, "arena.master", master=True, start=False, reaper=reaper)
        init_model(master)
        self.honest = [join(ps, f"arena.h{i}", start=False, reaper=reaper) for i in range(3)]
        self.stub, self.session = raw_session(ps, "arena.evil")
        self.observer = Observer(ps, "arena.observer")
        self.rounds = 0
        self.honest_steps: list[float] = []
        for _ in range(3):  # warm up: the norm bound's window holds three distinct honest clients
            self.honest_round(record=True)

    def model(self) -> tuple[int, np.ndarray]:
        return self.observer.model()

    def honest_round(self, *, record: bool = False) -> list[float]:
        """Each honest client pushes once on the newest version; the step each push caused."""
        steps = []
        for i, client in enumerate(self.honest):
            version, before = self.model()
            push(
                client,
                version,
                delta_for(f"honest/{i}/{self.rounds}", NUMEL),
                codec=self.codec,
                tokens=FULL_SYNC,
                local_steps=H,
            )
            after_version, after = self.model()
            assert after_version == version + 1 and np.isfinite(after).all()
            steps.append(float(np.linalg.norm(after.astype(np.float64) - before)))
        self.rounds += 1
        if record:
            self.honest_steps += steps
        return steps

    @property
    def honest_step(self) -> float:
        return max(self.honest_steps)

    def attack(self, values: np.ndarray, *, tokens: int = MAX_TOKENS, frame_elems: int = 1 << 20) -> float:
        """Push `values` as the attacker on the newest version; the step it caused (and the next rounds' bound)."""
        version, before = self.model()
        result = raw_push(
            self.stub,
            self.session,
            attack_messages(
                values, codec=self.codec, base=version, upload=f"evil/{version}", tokens=tokens, frame_elems=frame_elems
            ),
        )
        assert result.status == pb.APPLIED
        after_version, after = self.model()
        assert after_version == version + 1 and np.isfinite(after).all()
        return float(np.linalg.norm(after.astype(np.float64) - before))


@pytest.fixture(scope="module", params=COMBOS, ids=[f"{c}-{o}" for c, o in COMBOS])
def arena(request, tmp_path_factory):
    codec, outer = request.param
    with Reaper() as reaper:
        ps = PSNode(
            tmp_path_factory.mktemp(f"attack-{codec}-{outer}") / "ps",
            {"aggregation": {"outer_optimizer": outer}},
            metrics=True,
        )
        reaper.add(ps.kill)
        ps.start()
        yield Arena(ps, codec, reaper)


def _assert_contained(arena: Arena, step: float) -> None:
    assert step <= BOUND * arena.honest_step, f"attack moved the model {step / arena.honest_step:.1f} honest steps"
    after = arena.honest_round()  # momentum must not carry the attack further than a bounded step either
    assert max(after) <= BOUND * arena.honest_step, [s / arena.honest_step for s in after]


def test_huge_values_with_two_to_the_64_tokens_are_bounded(arena):
    _assert_contained(arena, arena.attack(alternating(1e6)))


def test_1e17_in_small_frames_is_bounded(arena):
    _assert_contained(arena, arena.attack(alternating(1e17), frame_elems=1024))


def test_largest_squarable_float_with_two_to_the_64_tokens_is_bounded(arena):
    _assert_contained(arena, arena.attack(alternating(1.845e19)))


def test_a_delta_of_1000_times_an_honest_norm_with_normal_tokens_is_bounded(arena):
    _assert_contained(arena, arena.attack(1000 * delta_for("evil/1000x", NUMEL), tokens=FULL_SYNC))


def test_eight_deltas_against_one_base_version_land_once(arena):
    version, before = arena.model()
    refused_before = rejected(arena.ps, "already_sent")
    results = []
    for i in range(8):
        msgs = attack_messages(
            1000 * delta_for(f"evil/eight/{i}", NUMEL),
            codec=arena.codec,
            base=version,
            upload=f"evil/eight/{i}",
            tokens=FULL_SYNC,
        )
        results.append(
            rpc_code(lambda m=msgs: raw_push(arena.stub, arena.session, m))
            if i
            else raw_push(arena.stub, arena.session, msgs)
        )
        if i == 0:
            _, after_first = arena.model()

    assert results[0].status == pb.APPLIED
    assert all(
        code == grpc.StatusCode.ALREADY_EXISTS and "already sent a delta on base version" in details
        for code, details in results[1:]
    ), results[1:]
    now_version, now = arena.model()
    assert now_version == version + 1 and now.tobytes() == after_first.tobytes()  # refusals changed nothing
    assert rejected(arena.ps, "already_sent") - refused_before == 7
    _assert_contained(arena, float(np.linalg.norm(after_first.astype(np.float64) - before)))


# ---- synchronous rounds --------------------------------------------------------------------------


@pytest.fixture(scope="module", params=COMBOS, ids=[f"{c}-{o}" for c, o in COMBOS])
def sync_arena(request, tmp_path_factory):
    codec, outer = request.param
    with Reaper() as reaper:
        # Default settings but sync mode and a short straggler timeout (observers count as active clients).
        ps = PSNode(
            tmp_path_factory.mktemp(f"sync-{codec}-{outer}") / "ps",
            {"aggregation": {"mode": "sync", "outer_optimizer": outer, "straggler_timeout_s": 1.5}},
            metrics=True,
        )
        reaper.add(ps.kill)
        ps.start()
        master = join(ps, "sync.master", master=True, start=False, reaper=reaper)
        init_model(master)
        yield ps, codec, master, reaper


def _wait_version(observer: Observer, version: int, timeout: float = 20.0) -> np.ndarray:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v, model = observer.model()
        if v >= version:
            assert v == version
            return model
        time.sleep(0.2)
    raise AssertionError(f"version {version} never came")


def test_two_pushes_into_one_sync_round_are_refused_and_the_round_stays_finite(sync_arena):
    ps, codec, _, reaper = sync_arena
    honest = [join(ps, f"sync.h{i}", start=False, reaper=reaper) for i in range(3)]
    stub, session = raw_session(ps, "sync.evil")
    accomplice_stub, accomplice = raw_session(ps, "sync.accomplice")
    observer = Observer(ps, "sync.observer")
    version, model = observer.model()
    steps = []
    for r in range(3):  # honest rounds fill the norm bound's window
        for i, c in enumerate(honest):
            push(c, version, delta_for(f"sync/{i}/{r}", NUMEL), codec=codec, tokens=FULL_SYNC, local_steps=H)
        new = _wait_version(observer, version + 1)
        steps.append(float(np.linalg.norm(new.astype(np.float64) - model)))
        version, model = version + 1, new
    refused_before = rejected(ps, "already_sent")

    first = raw_push(stub, session, attack_messages(alternating(1.845e19), codec=codec, base=version, upload="e1"))
    code, details = rpc_code(
        lambda: raw_push(stub, session, attack_messages(-alternating(1.845e19), codec=codec, base=version, upload="e2"))
    )
    raw_push(
        accomplice_stub, accomplice, attack_messages(alternating(1.845e19), codec=codec, base=version, upload="a1")
    )
    for i, c in enumerate(honest):
        push(c, version, delta_for(f"sync/{i}/attacked", NUMEL), codec=codec, tokens=FULL_SYNC, local_steps=H)
    attacked = _wait_version(observer, version + 1)

    assert first.status == pb.ACCEPTED
    assert code == grpc.StatusCode.ALREADY_EXISTS and "one delta per site per round" in details
    assert rejected(ps, "already_sent") - refused_before == 1
    assert np.isfinite(attacked).all()
    step = float(np.linalg.norm(attacked.astype(np.float64) - model))
    assert step <= BOUND * max(steps), f"two attackers moved the round {step / max(steps):.1f} honest steps"
