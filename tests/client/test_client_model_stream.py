"""The client's model-stream receiver against a fake PS: damaged chunks are refetched from their offset."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from client_agent.connection.model_transfer import ChunkDamaged, ModelAssembler, TransferRestart
from client_agent.connection.ps_client import PSClient
from ps_server.aggregation.downlink import GridStream
from ps_server.global_model import GlobalModel
from ps_server.grpc_api import model_chunks

NUMEL = 40_000
MANIFEST = (("w", (NUMEL,), "float32"),)
CHUNK = 16_384


class _Call:
    def __init__(self, chunks) -> None:
        self.chunks = chunks

    def __iter__(self):
        return iter(self.chunks)

    def cancel(self) -> None:
        pass


class FakeStub:
    """Serves two versions through the PS's own downlink and chunker; damages chosen chunks once."""

    def __init__(self, damage: set[tuple[int, int]]) -> None:
        rng = np.random.default_rng(0)
        model, self.stream = GlobalModel(), GridStream(steps=8.0, history=4)
        flat = rng.normal(0, 0.02, NUMEL).astype(np.float32)
        self.snaps = [model.publish(1, flat, MANIFEST),
                      model.publish(2, (flat + rng.standard_t(3.0, NUMEL) * 1e-4).astype(np.float32), MANIFEST)]
        self.damage, self.requests = set(damage), []

    def StreamModel(self, req, metadata=None):  # noqa: N802 - the gRPC method name
        self.requests.append((req.have_version, req.resume_version, req.resume_offset))
        out = []
        for snap in self.snaps:
            if snap.version <= req.have_version:
                continue
            down = self.stream.downlink(snap, req.have_version)
            start = req.resume_offset if req.resume_version == snap.version else 0
            for chunk in model_chunks(down, start, CHUNK):
                if (chunk.version, chunk.offset) in self.damage:
                    self.damage.discard((chunk.version, chunk.offset))
                    chunk.data = bytes([chunk.data[0] ^ 1]) + chunk.data[1:]
                out.append(chunk)
            req.have_version = snap.version  # the real PS goes on with the next version on the same stream
        return _Call(out)


def _client(stub: FakeStub) -> PSClient:
    client = PSClient("127.0.0.1:1", "t.a", lambda: "", insecure=True)
    client.stub, client.session = stub, "session"
    return client


def test_damaged_chunks_are_refetched_from_their_offset_and_both_versions_arrive_bit_exact():
    # Prepare: damage a chunk in the middle of the full transfer and the first of the difference
    stub = FakeStub({(1, CHUNK), (2, 0)})
    client = _client(stub)
    expected = [stub.stream.published(s).flat for s in stub.snaps]

    # Execute
    thread = threading.Thread(target=client.stream.run, daemon=True)
    thread.start()
    got = client.wait_for_version(1, timeout=30)
    client._stop.set()
    thread.join(timeout=10)

    # Assert
    assert got is not None and got.version == 2
    assert np.array_equal(got.flat.view(np.uint32), expected[1].view(np.uint32))
    assert (0, 1, CHUNK) in stub.requests  # resumed at the damaged chunk's offset, not from the start
    assert client.model_resumes >= 1
    client.channel.close()


def test_the_assembler_flags_a_bad_crc_a_wrong_base_and_a_bad_digest():
    stub = FakeStub(set())
    first = list(model_chunks(stub.stream.downlink(stub.snaps[0], 0), 0, CHUNK))
    diff = list(model_chunks(stub.stream.downlink(stub.snaps[1], 1), 0, 1 << 22))
    assert diff[0].encoding == "grid_delta"
    held = (1, np.zeros(NUMEL // 2, np.float32))  # not v1's size: the difference cannot apply

    bad_crc = type(first[0])()
    bad_crc.CopyFrom(first[0])
    bad_crc.crc32 ^= 1
    with pytest.raises(ChunkDamaged):
        ModelAssembler().take(bad_crc, None)
    with pytest.raises(TransferRestart, match="holds 7"):
        ModelAssembler().take(diff[0], (7, held[1]))
    with pytest.raises(TransferRestart):
        ModelAssembler().take(diff[0], held)  # wrong size for the difference
    whole = list(model_chunks(stub.stream.downlink(stub.snaps[0], 0), 0, 1 << 22))[0]
    whole.sha256 = bytes(32)
    with pytest.raises(TransferRestart, match="sha256"):
        ModelAssembler().take(whole, None)
