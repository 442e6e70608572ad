"""What the interval tuner measures on the client: download rate, RTT, step time; and the tuner's choice of T/H."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import types
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from client_agent.connection import link_tuner, model_stream
from client_agent.connection import ps_client as ps_client_module
from client_agent.connection.link_tuner import LinkMeter, LinkTuner, blend
from client_agent.connection.model_transfer import ModelAssembler
from client_agent.connection.ps_client import PSClient
from client_agent.training.trainer import TrainStats
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.messages import manifest_to_proto

CHUNK = 512 << 10


def _client() -> PSClient:
    client = PSClient("127.0.0.1:1", "t.a", lambda: "", insecure=True)
    client.session = "session"
    return client


def _fp32_chunks(version: int, flat: np.ndarray) -> list[pb.ModelChunk]:
    data = flat.tobytes()
    out = []
    for off in range(0, len(data), CHUNK):
        piece = data[off : off + CHUNK]
        chunk = pb.ModelChunk(version=version, offset=off, total_bytes=len(data), data=piece, encoding="fp32",
                              crc32=zlib.crc32(piece))
        if off == 0:
            chunk.manifest.extend(manifest_to_proto([("w", (flat.size,), "float32")]))
        if off + CHUNK >= len(data):
            chunk.sha256 = hashlib.sha256(data).digest()
        out.append(chunk)
    return out


def test_blend_is_the_mean_of_the_estimate_and_the_sample():
    assert blend(None, 4.0) == 4.0
    assert blend(4.0, 2.0) == 3.0


def test_download_rate_leaves_out_the_first_chunk(monkeypatch):
    # Prepare: a 2 MiB fp32 transfer in 4 chunks of 512 KiB; the first arrives at t = 100, the last at t = 101.5
    clock = {"t": 100.0}
    monkeypatch.setattr(model_stream, "time", types.SimpleNamespace(monotonic=lambda: clock["t"], sleep=time.sleep))
    client = _client()
    flat = np.arange(CHUNK // 4 * 4, dtype=np.float32)
    chunks = _fp32_chunks(1, flat)
    assembler = ModelAssembler()

    # Execute
    for i, chunk in enumerate(chunks):
        clock["t"] = 100.0 + 0.5 * i
        client.stream.take_chunk(assembler, chunk)

    # Assert: 3 chunks (1.5 MiB) after the first, in 1.5 s: 1 MiB/s
    assert client.latest().version == 1
    assert client.link.down_bytes_per_s == (3 * CHUNK) / 1.5
    assert client.link.last_model_bytes == flat.nbytes
    client.close()


def test_a_one_chunk_transfer_that_needed_no_wait_is_timed_from_the_stream_opening(monkeypatch):
    # Prepare: RTT 0.2 s; the stream opened at t = 100 when the PS was known to hold a newer version than ours
    clock = {"t": 100.0}
    monkeypatch.setattr(model_stream, "time", types.SimpleNamespace(monotonic=lambda: clock["t"], sleep=time.sleep))
    client = _client()
    client.link.rtt_s = 0.2
    flat = np.arange(CHUNK // 4, dtype=np.float32)  # 512 KiB: one chunk
    client.link.stream_opened(100.0, True)

    # Execute: version 5 arrives whole at t = 100.7; then a stream opened at t = 200 with nothing newer known at
    # the PS (a sync round still open) gets version 6 when the round closes
    clock["t"] = 100.7
    client.stream.take_chunk(ModelAssembler(), _fp32_chunks(5, flat)[0])
    first_rate = client.link.down_bytes_per_s
    client.link.stream_opened(200.0, False)
    clock["t"] = 230.0  # version 6 was published (a round closed) while the stream waited: not a link time
    client.stream.take_chunk(ModelAssembler(), _fp32_chunks(6, flat)[0])

    # Assert: 512 KiB over 0.7 s less one RTT = 1 MiB/s; the waited-for version leaves the rate alone
    assert first_rate == pytest.approx(CHUNK / 0.5)
    assert client.link.down_bytes_per_s == first_rate
    client.close()


def test_a_one_chunk_transfer_is_not_timed():
    client = _client()
    flat = np.ones(1000, dtype=np.float32)
    client.stream.take_chunk(ModelAssembler(), _fp32_chunks(1, flat)[0])
    assert client.link.down_bytes_per_s is None and client.link.last_model_bytes == 4000
    client.close()


def test_the_heartbeat_times_its_round_trip():
    client = _client()
    client.session_ttl_s = 3.0  # a heartbeat every second

    class Stub:
        def Heartbeat(self, request, metadata=None, timeout=None):  # noqa: N802 - the gRPC method name
            time.sleep(0.05)
            client._stop.set()

    client.stub = Stub()
    client._heartbeat_loop()
    assert 0.05 <= client.link.rtt_s < 1.0
    client.close()


def test_the_rtt_is_the_least_recent_round_trip_so_a_stalled_heartbeat_does_not_count():
    meter = LinkMeter()
    for sample in (0.05, 3.5, 0.06):  # the middle heartbeat waited out a black hole
        meter.round_trip(sample)
    assert meter.rtt_s == 0.05
    for _ in range(link_tuner.RTT_WINDOW):  # the path itself got slower: after a window, that is the RTT
        meter.round_trip(0.2)
    assert meter.rtt_s == 0.2


def test_step_time_of_a_round():
    stats = TrainStats(steps=4, tokens=0, samples=0, mean_loss=0.0, tokens_per_s=0.0, seconds=2.0,
                       stopped_by="steps", lr=0.0, grad_norm=0.0)
    assert stats.step_s == 0.5
    assert TrainStats(0, 0, 0, 0.0, 0.0, 0.0, "deadline", 0.0, 0.0).step_s is None


def test_the_tuner_lengthens_the_interval_from_its_measurements_and_logs_each_change(caplog):
    # Prepare
    fixed = FederationConfig.model_validate({"training": {"sync_interval_s": 6, "local_steps": 40}})
    tuned = FederationConfig.model_validate({"training": {"sync_interval_s": 6, "local_steps": 40},
                                             "autotune": {"interval": True, "comm_fraction": 0.2}})
    meter = LinkMeter()
    measured = SimpleNamespace(up_bytes_per_s=1e6, down_bytes_per_s=4e6, rtt_s=0.05, last_push_bytes=2_000_000,
                               last_model_bytes=8_000_000)
    tuner = LinkTuner(tuned, meter, 1000, "t.tune")

    # Execute and assert
    with caplog.at_level(logging.INFO, logger="geofed.client"):
        assert LinkTuner(fixed, meter, 1000, "t.fixed").interval() == (6.0, 40)
        assert tuner.interval() == (6.0, 40)  # nothing measured: the configured T, H
        meter.__dict__.update(measured.__dict__)
        tuner.step_s = 0.5
        # C = 4.1 s: T = 17 s (test_tuning_policy), longer than the configured 6 s round: lengthened
        assert tuner.interval() == (17.0, 34)
        assert tuner.interval() == (17.0, 34)
        tuner.step_s = 2.0  # the client slowed down: same T, fewer steps
        assert tuner.interval() == (17.0, 9)
    lines = [r.getMessage() for r in caplog.records if "event=autotune" in r.getMessage()]
    assert len(lines) == 3  # the fixed interval is not logged as a tuned one
    assert "knob=sync_interval value=6 steps=40" in lines[0] and "not measured yet" in lines[0]
    assert "knob=sync_interval value=17 steps=34" in lines[1]
    assert "knob=sync_interval value=17 steps=9" in lines[2]


class _PushStub:
    """PushDelta answers `status` after `seconds` of the fake clock (the payload is not read: as a PS that
    answers DUPLICATE right after the header)."""

    def __init__(self, clock: dict, status: int, seconds: float) -> None:
        self.clock, self.status, self.seconds = clock, status, seconds

    def PushDelta(self, messages, metadata=None, timeout=None):  # noqa: N802 - the gRPC method name
        self.clock["t"] += self.seconds
        return pb.PushResult(status=self.status, version=2)


def test_a_duplicate_answer_is_not_timed_as_an_upload(monkeypatch):
    # Prepare: a 1 MiB upload; an APPLIED push takes 1 s, a DUPLICATE answer 1 ms
    clock = {"t": 10.0}
    monkeypatch.setattr(ps_client_module, "time", types.SimpleNamespace(monotonic=lambda: clock["t"],
                                                                        sleep=time.sleep))
    client = _client()
    upload = SimpleNamespace(header=SimpleNamespace(payload_bytes=1 << 20), spool=None, digest=b"")

    # Execute
    client.stub = _PushStub(clock, pb.APPLIED, 1.0)
    applied = client._send(upload)
    client.stub = _PushStub(clock, pb.DUPLICATE, 0.001)
    duplicate = client._send(upload)

    # Assert: the rate is the APPLIED push's 1 MiB/s, not blended with 1 GiB/s
    assert (applied.status, duplicate.status) == ("APPLIED", "DUPLICATE")
    assert client.link.up_bytes_per_s == float(1 << 20)
    client.close()


class _Call:
    """A server stream's call object: its chunks, then the end of the stream; cancel() is a no-op."""

    def __init__(self, chunks: list) -> None:
        self.chunks = iter(chunks)

    def __iter__(self):
        return self.chunks

    def cancel(self) -> None:
        pass


def test_the_model_stream_survives_an_unexpected_error():
    # Prepare: the first StreamModel call fails with an error the loop does not expect, the second streams v1
    flat = np.arange(1000, dtype=np.float32)
    calls = []

    class Stub:
        def StreamModel(self, request, metadata=None):  # noqa: N802 - the gRPC method name
            calls.append(request)
            if len(calls) == 1:
                raise ValueError("huffman decode: bad arguments")
            return _Call(_fp32_chunks(1, flat))

    client = _client()
    client.stub = Stub()

    # Execute: the stream loop alone, on a thread of ours (start() would open the heartbeat loop too)
    thread = threading.Thread(target=client.stream.run, daemon=True)
    thread.start()
    got = client.wait_for_version(0, timeout=20)
    client.close()
    thread.join(timeout=10)

    # Assert: the loop lived on, reopened the stream and delivered the model
    assert got is not None and got.version == 1
    assert np.array_equal(got.flat, flat)
    assert len(calls) >= 2


def test_the_stream_loop_times_a_transfer_the_ps_could_send_at_once(monkeypatch):
    # Prepare: the client holds nothing, a Join named version 1; the PS answers the stream after 0.7 s (RTT 0.2 s)
    clock = {"t": 50.0}
    monkeypatch.setattr(model_stream, "time", types.SimpleNamespace(monotonic=lambda: clock["t"], sleep=time.sleep))
    client = _client()
    client.link.rtt_s, client.stream.version_seen = 0.2, 1
    flat = np.arange(CHUNK // 4, dtype=np.float32)

    class Stub:
        def StreamModel(self, request, metadata=None):  # noqa: N802 - the gRPC method name
            if request.have_version:  # the second opening: end the loop
                client._stop.set()
                return _Call([])
            clock["t"] += 0.7
            return _Call(_fp32_chunks(1, flat))

    client.stub = Stub()

    # Execute
    client.stream.run()

    # Assert: 512 KiB in 0.7 s less one RTT
    assert client.latest().version == 1
    assert client.link.down_bytes_per_s == pytest.approx(CHUNK / 0.5)
    client.close()
