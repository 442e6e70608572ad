"""A real PS running the sparse mode (issue 16) over gRPC: a sparse push with an index out of range or
repeated, a non-finite chunk scale, or a density or bit width beyond the federation's settings is refused
with INVALID_ARGUMENT and a message naming the problem, and the global model stays byte for byte as it was;
the same hand-built push, made valid, is applied."""

from __future__ import annotations

import struct

import grpc
import numpy as np
import pytest

from geofed.codec.header import StreamHeader, pack_frame, pack_header
from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, delta_messages, fetch_model, init_model, join, raw_push, raw_session, rpc_code

CHUNK, K = 512, 10  # the federation: 2 % of every 512 values, 2-bit values
LENS = [CHUNK] * (NUMEL // CHUNK) + [NUMEL % CHUNK]


def _bits(values, width) -> bytes:
    """LSB-first bit packing (the sparse wire format), written here independently of the codec."""
    bits = [(v >> i) & 1 for v in values for i in range(width)]
    bits += [0] * (-len(bits) % 8)
    return bytes(sum(b << i for i, b in enumerate(bits[j : j + 8])) for j in range(0, len(bits), 8))


def sparse_push(*, k=K, bits=2, positions=None, scales=None) -> tuple[bytes, bytes]:
    """(codec header, payload) of one frame with fixed-width (9-bit) indices: by default positions 0..k-1 of
    every chunk, scale 0.01, all values +scale/2."""
    positions = positions or [list(range(min(k, n))) for n in LENS]
    scales = scales or [0.01] * len(LENS)
    idx = _bits([p for chunk in positions for p in chunk], 9)
    codes = _bits([0] * sum(len(c) for c in positions), bits)
    body = np.asarray(scales, "<f4").tobytes() + struct.pack("<BI", 0, len(idx)) + idx + codes
    name = f"sparse/c{CHUNK}k{k}v{bits}+fixed"
    return pack_header(StreamHeader(name, NUMEL, NUMEL, b"")), pack_frame(0, NUMEL, body)


def _with(chunk: int, values: list[int]) -> list[list[int]]:
    positions = [list(range(min(K, n))) for n in LENS]
    positions[chunk] = values
    return positions


@pytest.fixture(scope="module")
def ps(tmp_path_factory):
    fed = {"aggregation": {"mode": "async", "buffer_size": 1},
           "codec": {"name": "sparse", "sparse_chunk": CHUNK, "sparse_density": 0.02, "sparse_value_bits": 2}}
    proc = PSNode(tmp_path_factory.mktemp("sparse-bad"), fed).start()
    master = join(proc, "sb.master", master=True)
    init_model(master)
    master.close()
    yield proc
    proc.kill()


CASES = [
    ("index_out_of_range", dict(positions=_with(len(LENS) - 1, [0, 1, 2, 3, 4, 5, 6, 7, 8, NUMEL % CHUNK])),
     "index out of range"),
    ("index_repeated", dict(positions=_with(1, [0, 1, 2, 3, 4, 5, 6, 7, 7, 9])), "repeated or out of order"),
    ("scale_nan", dict(scales=[0.01, float("nan")] + [0.01] * (len(LENS) - 2)), "chunk 1 has scale nan"),
    ("scale_inf", dict(scales=[float("inf")] + [0.01] * (len(LENS) - 1)), "chunk 0 has scale inf"),
    ("too_dense", dict(k=K + 1), "above the federation's 0.02"),
    ("too_many_bits", dict(bits=4), "4-bit values are above the federation's 2 bits"),
]


@pytest.mark.parametrize(("name", "kwargs", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_sparse_push_refused_and_model_untouched(ps, name, kwargs, fragment):
    stub, sess = raw_session(ps, f"sb.{name.replace('_', '-')}")
    before = fetch_model(stub, sess)

    code, details = rpc_code(lambda: raw_push(stub, sess, delta_messages(*sparse_push(**kwargs), base=before[0])))

    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert fragment in details, details
    assert fetch_model(stub, sess) == before  # version and every byte of the global model unchanged


def test_the_same_push_made_valid_is_applied(ps):
    stub, sess = raw_session(ps, "sb.good")
    version, data = fetch_model(stub, sess)
    result = raw_push(stub, sess, delta_messages(*sparse_push(), base=version))
    assert result.version == version + 1
    new_version, new_data = fetch_model(stub, sess)
    moved = np.frombuffer(new_data, np.float32) - np.frombuffer(data, np.float32)
    assert new_version == version + 1 and np.count_nonzero(moved) > 0
