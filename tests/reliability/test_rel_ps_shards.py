"""A sharded PS (issue 18) with real processes: a front and two shards on sockets, clients over gRPC.

SIGKILL one shard mid-round, restart it from its checkpoint directory: the delta the front had accepted
is replayed from the shard's disk and the published model is what an independent reference (numpy over
the same decoded deltas, FedAvg with global lr 1) says, never a mix of versions. The bad inputs of the
issue travel the wire too: a frame crossing a shard boundary, a stale shard map.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from client_agent.connection.ps_client import PSClient, StaleDeltaError
from geofed.codec import make_codec
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.channel import open_channel
from geofed_apps.launch import wait_until, write_token
from geofed_apps.shards import ShardedPS
from geofed_testing.wire import delta_messages, encoded, fetch_model, raw_push, rpc_code

MANIFEST = [("a", (40, 25), "float32"), ("b", (700,), "float32"), ("c", (30, 20), "float32"), ("d", (300,), "float32")]
NUMEL = 1000 + 700 + 600 + 300
FED = {"ps_shards": 2, "aggregation": {"mode": "async", "buffer_size": 2, "outer_optimizer": "fedavg",
                                       "global_lr": 1.0}}


def start(tmp_path, reaper) -> ShardedPS:
    fed_file = tmp_path / "federation.yaml"
    import yaml

    fed_file.write_text(yaml.safe_dump(FED))
    ps = ShardedPS(tmp_path / "ps", fed_file, 2, extra=["--rate-limit-per-s", "1000"])
    for p in ps.all:
        reaper.add(p.kill)
    return ps.start()


def client(ps: ShardedPS, tmp_path, client_id: str, master: bool = False) -> PSClient:
    with ps.front.admin() as admin:
        token = admin.create_token(client_id, site="", ttl_s=600, master=master)[0]
    write_token(tmp_path / f"{client_id}.token", token)
    c = PSClient(ps.front.address, client_id, lambda: token, insecure=True)
    c.join()
    c.start()
    return c


def send(c: PSClient, base: int, values: np.ndarray, **kw):
    header, frames = make_codec("fp32").encode(values, cuts=c.shard_cuts, frame_elems=512)
    return c.push(base_version=base, codec_header=header, frames=frames, num_tokens=100, **kw)


def front_stub(ps: ShardedPS):
    return pb_grpc.ParameterServerStub(open_channel(ps.front.address, insecure=True))


@pytest.mark.timeout(240)
def test_shard_sigkilled_mid_round_loses_nothing_and_publishes_no_mix(tmp_path, reaper):
    ps = start(tmp_path, reaper)
    rng = np.random.default_rng(0)
    theta = rng.standard_normal(NUMEL).astype(np.float32)
    d1, d2 = [(rng.standard_normal(NUMEL) * 1e-3).astype(np.float32) for _ in range(2)]
    master = client(ps, tmp_path, "s.master", master=True)
    reaper.add(master.close)
    header, frames = make_codec("fp32").encode(theta, frame_elems=512)  # Θ0: the front cuts its fp32 frames
    assert master.push(base_version=0, codec_header=header, frames=frames, init=True,
                       manifest=MANIFEST).version == 1
    # The master joined before there was a model, so it learns the shard map with version 1 on its model
    # stream; pushing before that arrives is (rightly) STALE, so wait for it as the agent does.
    assert master.wait_for_version(0, timeout=60) is not None and master.shard_cuts == (1000,)
    other = client(ps, tmp_path, "s.other")
    reaper.add(other.close)
    assert other.shard_cuts == (1000,) and len(other.shard_map) == 16  # learnt at Join: a | b, c, d

    assert send(master, 1, d1).status == "ACCEPTED"  # the open round holds d1 on both shards
    ps.shards[1].kill()  # SIGKILL mid-round: its sum of the open round is gone
    ps.shards[1].start()  # same port, same checkpoint directory
    assert send(other, 1, d2).status == "APPLIED"  # the front replays d1 on shard 1, folds d2, publishes v2

    stub = front_stub(ps)
    with ps.front.admin() as admin:
        status = admin.status()
    assert status["version"] == 2
    sess = stub.Join(__import__("geofed.protocol.geofed_pb2", fromlist=["x"]).JoinRequest(
        token=_token(ps, "s.observer"), client_id="s.observer"), timeout=10).session
    version, data = fetch_model(stub, sess)
    got = np.frombuffer(data, dtype=np.float32)
    reference = theta + (d1 + d2) / np.float32(2)  # FedAvg, equal token weights, global lr 1
    assert version == 2
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-6)
    log = ps.front.logs()
    assert "event=shard_replayed shard=1" in log and "folds=1" in log


def _token(ps: ShardedPS, client_id: str) -> str:
    with ps.front.admin() as admin:
        return admin.create_token(client_id, site="", ttl_s=600)[0]


@pytest.mark.timeout(240)
def test_bad_input_crossing_frames_and_stale_shard_map_are_refused(tmp_path, reaper):
    from geofed.protocol import geofed_pb2 as pb

    ps = start(tmp_path, reaper)
    theta = np.zeros(NUMEL, np.float32)
    master = client(ps, tmp_path, "b.master", master=True)
    reaper.add(master.close)
    header, frames = make_codec("fp32").encode(theta, frame_elems=512)
    master.push(base_version=0, codec_header=header, frames=frames, init=True, manifest=MANIFEST)
    stub = front_stub(ps)
    sess = stub.Join(pb.JoinRequest(token=_token(ps, "b.raw"), client_id="b.raw"), timeout=10)
    # The master joined before the model (and so the shard bounds) existed: it learns the map from the stream.
    wait_until(lambda: master.shard_map, 30, "the master's shard map from the model stream")
    assert list(sess.shard_bounds) == [0, 1000, NUMEL] and sess.shard_map == master.shard_map

    # A frame crossing the boundary at 1000 (encoded for a single PS: frames of 1024 from 0).
    h, payload = encoded(np.ones(NUMEL, np.float32) * 1e-3)
    code, details = rpc_code(lambda: raw_push(stub, sess.session, delta_messages(
        h, payload, upload_id="x1", shard_map=sess.shard_map)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "crosses the boundary of PS shard 0 at element 1000" in details

    # A push cut for another shard map: STALE with the current map, before any payload is taken.
    result = raw_push(stub, sess.session, delta_messages(h, payload, upload_id="x2", shard_map=b"0" * 16))
    assert result.status == pb.STALE and "another PS shard map" in result.message

    # A client that holds no shard map at all (joined a single PS, say) is told the same.
    with pytest.raises(StaleDeltaError, match="another PS shard map"):
        master.shard_map = b""
        send(master, 1, np.ones(NUMEL, np.float32) * 1e-3)

    # Nothing of any of them was applied: the shards and the front still hold version 1.
    with ps.front.admin() as admin:
        status = admin.status()
    assert status["version"] == 1 and [s["version"] for s in status["shards"]] == [1, 1]
