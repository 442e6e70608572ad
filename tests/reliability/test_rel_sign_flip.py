"""A site pushing against the federation, over the wire against a real `geofed ps` with default settings but H 40.

Three honest sites push deltas that share part of their direction (as real training deltas do); a fourth site
pushes the negation of a delta like theirs at 3 × an honest norm, every round, half the time padded with noise
(longer, its projection unchanged). The norm bound lets all of that through; the consensus bound holds each
hostile version step's component along the honest sites' directions to the rule recomputed here, from the
honest deltas as pushed (not with the PS's helpers):

- for each honest site, u = the unit sum of its deltas as they landed; the projection of a step is the upper median
  over the honest sites of step · u (the middle one of three);
- under FedAvg (η = 0.5, K = 1) a version moves the model by η × the bounded delta, so a hostile version's
  projection may not be below −η × 0.1 × the reference (the median over the honest sites of the median of
  their last 5 norms).

Honest deltas are never scaled down; every codec, the sharded PS and a LoRA federation (its exchanged vector:
one layer's adapters) get the same bound. Under Adam (β₁ = 0.9: its
momentum is normalised per coordinate) the bound applies too: every hostile delta is scaled by it, no honest one
(a version's step is Adam's normalised increment there, so the projection floor above is FedAvg's alone).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from geofed.codec import make_codec
from geofed.codec.sparse import sparse_params
from geofed.config import CodecConfig, ModelConfig, TrainingConfig
from geofed.protocol import geofed_pb2 as pb
from geofed_apps.shards import ShardedPS
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import NUMEL, Observer, init_model, join, push, raw_push, theta0
from tests.reliability.test_rel_attacks import attack_messages
from tests.reliability.test_rel_sybil import LORA_MANIFEST, counter, site_session
from tests.reliability.test_rel_sybil_shards import Front, Sybil

# H 40 local steps: the honest deltas' length NORM stays within the start bound of the smallest exchanged vector
# here (one layer's LoRA adapters, 440 values), which scales with √H.
T = TrainingConfig(local_steps=40)
H = T.local_steps
FULL_SYNC = T.batch_size * ModelConfig().block_size * H
ETA = 0.5  # the default global_lr
NORM = 0.55  # an honest delta's length (about a test delta's, within the start bound)
SHARED = 0.3  # the part of an honest delta's squared length along the federation's common direction
ALLOWANCE = 0.1
SPARSE = {"name": "sparse", "sparse_chunk": 512, "sparse_density": 0.05, "sparse_value_bits": 4}


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


LORA_NUMEL = sum(math.prod(shape) for _, shape, _ in LORA_MANIFEST)


class HonestSite:
    def __init__(self, seed: int, common: np.ndarray) -> None:
        self.rng, self.common = np.random.default_rng(seed), common
        self.pushed: list[np.ndarray] = []

    def delta(self) -> np.ndarray:
        noise = unit(self.rng.standard_normal(self.common.size))
        mixed = math.sqrt(SHARED) * self.common + math.sqrt(1 - SHARED) * noise
        return NORM * unit(mixed)


@pytest.fixture
def reaper():
    with Reaper() as r:
        yield r


def start_ps(tmp_path, reaper, codec: str, shards: bool, outer: str = "fedavg", lora: bool = False):
    """A default PS (a front and two shards when `shards`), with Θ0 of the test model (of one layer's LoRA
    adapters, the exchanged vector of a LoRA federation, when `lora`)."""
    federation: dict = {"training": {"local_steps": H}}
    if codec == "sparse":
        federation["codec"] = SPARSE
    if outer != "fedavg":
        federation["aggregation"] = {"outer_optimizer": outer}
    if lora:
        federation["paradigm"] = {"name": "lora"}
    if shards:
        fed_file = tmp_path / "federation.yaml"
        fed_file.write_text(yaml.safe_dump({**federation, "ps_shards": 2}))
        sharded = ShardedPS(tmp_path / "ps", fed_file, 2, extra=["--rate-limit-per-s", "1000"])
        for p in sharded.all:
            reaper.add(p.kill)
        sharded.start()
        ps = Front(sharded)
    else:
        ps = PSNode(tmp_path / "ps", federation, metrics=True)
        reaper.add(ps.kill)
        ps.start()
    master = join(ps, "boot.master", master=True, start=False, reaper=reaper)
    if lora:
        push(master, 0, theta0(LORA_NUMEL), init=True, manifest=LORA_MANIFEST)
    else:
        init_model(master)
    return ps


CASES = [("fp32", False, "fedavg", "pretrain"), ("int8", False, "fedavg", "pretrain"),
         ("sparse", False, "fedavg", "pretrain"), ("fp32", True, "fedavg", "pretrain"),
         ("fp32", False, "adam", "pretrain"), ("int8", False, "fedavg", "lora")]  # fmt: skip


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("codec", "shards", "outer", "paradigm"), CASES,
    ids=[f"{c}{'-shards' if s else ''}-{o}-{p}" for c, s, o, p in CASES],
)  # fmt: skip
def test_a_sign_flip_at_the_norm_bound_is_held_to_the_allowance_along_the_honest_directions(
    tmp_path, reaper, codec, shards, outer, paradigm
):
    encoder = make_codec("sparse", sparse=sparse_params(CodecConfig(**SPARSE))) if codec == "sparse" else None
    encoder = encoder or make_codec(codec)
    lora = paradigm == "lora"
    ps = start_ps(tmp_path, reaper, codec, shards, outer, lora)
    common = unit(np.random.default_rng(7).standard_normal(LORA_NUMEL if lora else NUMEL))
    sites = {f"site{i}": HonestSite(i, common) for i in range(3)}
    clients = {name: join(ps, f"{name}.trainer", site=name, start=False, reaper=reaper) for name in sites}
    with ps.admin() as admin:
        credential = admin.create_site_credential("evil")
    attacker = Sybil(ps, credential, "evil.one") if shards else None
    stub, session = site_session(ps, credential, "evil.one") if attacker is None else (None, "")
    observer = Observer(ps, "site0.observer")
    evil, noise = HonestSite(99, common), np.random.default_rng(5)

    def send(client, version: int, delta: np.ndarray) -> None:
        header, frames = encoder.encode(np.ascontiguousarray(delta, dtype=np.float32), cuts=client.shard_cuts)
        receipt = client.push(base_version=version, codec_header=header, frames=frames, num_tokens=FULL_SYNC,
                              local_steps=H)  # fmt: skip
        assert receipt.status == "APPLIED"

    def send_flip(values: np.ndarray, version: int, upload: str) -> pb.PushResult:
        if attacker is not None:
            return attacker.push(values, codec=codec, base=version, upload=upload)
        return raw_push(stub, session, attack_messages(values, codec=codec, base=version, upload=upload,
                                                       encoder=encoder))  # fmt: skip

    version, model = observer.model()
    raw, landed = [], []
    for r in range(8):
        for name, site in sites.items():
            delta = site.delta()
            send(clients[name], version, delta)
            new_version, new = observer.model()
            site.pushed.append(new.astype(np.float64) - model)  # as it landed (codec rounding included)
            version, model = new_version, new
        flip = -3 * evil.delta()
        if r % 2:
            flip = flip + 3 * NORM * unit(noise.standard_normal(common.size))
        directions = [unit(np.sum(s.pushed, axis=0)) for s in sites.values()]
        raw.append(sorted(float(flip @ u) for u in directions)[1])
        assert send_flip(flip.astype(np.float32), version, f"flip/{r}").status == pb.APPLIED
        new_version, new = observer.model()
        assert new_version == version + 1
        step = new.astype(np.float64) - model
        landed.append(sorted(float(step @ u) for u in directions)[1])
        version, model = new_version, new

    floor = -ETA * ALLOWANCE * NORM
    # Teeth: unbounded, every flip points far below the floor (η × the projection it was sent with).
    assert max(ETA * p for p in raw) < 4 * floor, raw
    # Bounded: each hostile version is on or above the floor, within the sketch's, the codec's and the published
    # model's grid rounding.
    tolerance = 0.05 * ETA * 3 * NORM * math.sqrt(2)
    if outer == "fedavg":
        assert all(p >= floor - tolerance for p in landed), [round(p / NORM, 3) for p in landed]
    if not shards:
        assert counter(ps, "geofed_bounded_deltas", "rule", "consensus") == len(landed)
    logs = ps.logs()
    assert "rule=consensus" in logs
    assert not any(f"event=delta_bounded client='{name}.trainer'" in logs for name in sites)
