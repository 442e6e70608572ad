"""One hostile site against a sharded PS (`ps_shards: 2`, a front and two shard processes on sockets), over the
wire: it is bounded exactly as on a single PS (`test_rel_sybil.py`, whose references these are, recomputed
here rather than read from the PS): one delta per site per base and round whatever its client ids, each delta
scaled to at most 3 × the median of the other sites' norms, and a drift along one direction held to its site's
displacement budget. The shards decode the slices; the front bounds the whole delta from what they report.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import yaml

from geofed.codec import make_codec
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.admin_client import AdminClient
from geofed_apps.shards import ShardedPS
from geofed_testing.ledger import delta_for
from geofed_testing.wire import NUMEL, Observer, init_model, join, raw_push, rpc_code
from tests.reliability.test_rel_attacks import attack_messages
from tests.reliability.test_rel_sybil import ETA, FULL_SYNC, SLACK, H, decoded_norm, step


class Front:
    """The front of a `ShardedPS` as the wire helpers address a PS (`address`, `admin`, `channel`, `tls`)."""

    tls = None

    def __init__(self, sharded: ShardedPS) -> None:
        self.sharded, self.address = sharded, sharded.front.address

    def admin(self) -> AdminClient:
        return self.sharded.front.admin()

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    def logs(self) -> str:
        return self.sharded.front.logs()


@pytest.fixture
def front(tmp_path, reaper) -> Front:
    fed_file = tmp_path / "federation.yaml"
    fed_file.write_text(yaml.safe_dump({"ps_shards": 2}))  # default settings otherwise
    sharded = ShardedPS(tmp_path / "ps", fed_file, 2, extra=["--rate-limit-per-s", "1000"])
    for p in sharded.all:
        reaper.add(p.kill)
    sharded.start()
    f = Front(sharded)
    init_model(join(f, "boot.master", master=True, start=False, reaper=reaper))
    return f


class Sybil:
    """A raw session of one client id of a site, with the shard map its Join named."""

    def __init__(self, ps: Front, credential: str, client_id: str) -> None:
        with AdminClient(ps.address, credential, insecure=True) as site:
            token = site.create_token(client_id)[0]
        self.stub = pb_grpc.ParameterServerStub(ps.channel())
        r = self.stub.Join(pb.JoinRequest(token=token, client_id=client_id), timeout=10)
        self.session, self.shard_map, self.cuts = r.session, r.shard_map, tuple(r.shard_bounds)[1:-1]
        assert self.cuts, "the front names its shard bounds at Join"

    def push(self, values: np.ndarray, *, codec: str, base: int, upload: str) -> pb.PushResult:
        """A PushDelta whose header fields the attacker chose (tokens, local steps), cut at the shard bounds."""
        msgs = attack_messages(values, codec=codec, base=base, upload=upload, cuts=self.cuts,
                               shard_map=self.shard_map)
        return raw_push(self.stub, self.session, msgs)


def honest_push(client, version: int, delta: np.ndarray, codec: str = "fp32") -> None:
    header, frames = make_codec(codec).encode(np.ascontiguousarray(delta), cuts=client.shard_cuts)
    client.push(base_version=version, codec_header=header, frames=frames, num_tokens=FULL_SYNC, local_steps=H)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("codec", ["fp32", "int8"])
def test_sybil_ids_of_one_site_land_once_per_version_and_stay_within_three_honest_norms(front, reaper, codec):
    with front.admin() as admin:
        evil_credential = admin.create_site_credential("evil")
    honest = join(front, "clinic.trainer", site="clinic", start=False, reaper=reaper)
    sybils = [Sybil(front, evil_credential, f"evil.s{i}") for i in range(4)]
    observer = Observer(front, "clinic.observer")

    honest_norms, honest_steps = [], []
    version, model = observer.model()
    for r in range(3):
        delta = delta_for(f"clinic/{r}", NUMEL)
        honest_norms.append(decoded_norm(delta, codec))
        honest_push(honest, version, delta, codec)
        new_version, new = observer.model()
        assert new_version == version + 1
        honest_steps.append(step(model, new))
        version, model = new_version, new
    for r in range(8):  # every Sybil id in turn, one per honest push (a site's share of a round is one delta)
        if r:
            delta = delta_for(f"clinic/more/{r}", NUMEL)
            honest_norms.append(decoded_norm(delta, codec))
            honest_push(honest, version, delta, codec)
            version, model = observer.model()
        bound = 3 * float(np.median(honest_norms[-5:]))  # the other site's entry: the median of its latest norms
        evil = 1000 * delta_for(f"evil/{r}", NUMEL)
        assert sybils[r % 4].push(evil, codec=codec, base=version, upload=f"evil/{r}").status == pb.APPLIED
        new_version, new = observer.model()
        moved = step(model, new)
        assert moved <= SLACK * ETA * bound, f"round {r}: {moved / max(honest_steps):.2f} honest steps"
        assert moved <= 3 * SLACK * max(honest_steps)
        version, model = new_version, new

        other = sybils[(r + 1) % 4]  # another id of the same site, on the same base version
        code, details = rpc_code(
            lambda o=other, v=version - 1, i=r: o.push(
                -1000 * delta_for(f"evil/again/{i}", NUMEL), codec=codec, base=v, upload=f"evil/again/{i}"
            )
        )
        assert code == grpc.StatusCode.ALREADY_EXISTS and "site quota" in details, details
        assert observer.model()[1].tobytes() == model.tobytes()
    assert "rule=norm_bound" in front.logs()


@pytest.mark.timeout(300)
def test_a_drift_just_under_the_bound_in_one_direction_stops_adding_up(front, reaper):
    """As `test_rel_sybil`'s drift under FedAvg: 24 pushes at 0.95 × the bound along one direction move the model
    along it by at most two displacement budgets (3 × √16 × the reference norm each)."""
    with front.admin() as admin:
        credential = admin.create_site_credential("evil")
    honest = join(front, "clinic.trainer", site="clinic", start=False, reaper=reaper)
    evil = Sybil(front, credential, "evil.one")
    observer = Observer(front, "clinic.observer")
    direction = delta_for("evil/direction", NUMEL).astype(np.float64)
    direction /= np.linalg.norm(direction)

    honest_norms, drift = [], 0.0
    version, model = observer.model()
    for r in range(24):
        delta = delta_for(f"clinic/{r}", NUMEL)
        honest_norms.append(float(np.linalg.norm(delta.astype(np.float64))))
        honest_push(honest, version, delta)
        version, model = observer.model()
        limit = 3 * float(np.median(honest_norms[-5:]))
        attack = (0.95 * limit * direction).astype(np.float32)
        assert evil.push(attack, codec="fp32", base=version, upload=f"drift/{r}").status == pb.APPLIED
        new_version, new = observer.model()
        drift += float((new.astype(np.float64) - model) @ direction)
        version, model = new_version, new

    budget = 3 * float(np.median(honest_norms[-5:])) * 4  # multiple × reference × √16
    assert drift <= 2 * 1.05 * ETA * budget, f"drifted {drift / (ETA * budget / 12):.1f} honest norms"
    logs = front.logs()
    assert "rule=displacement_budget" in logs
    assert "event=delta_bounded client='clinic.trainer'" not in logs  # honest deltas are never scaled
