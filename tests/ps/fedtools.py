"""Small helpers shared by the PS tests: join clients, push fp32/int8 deltas, raw wire calls."""

from __future__ import annotations

import hashlib

import grpc
import numpy as np

from client_agent.ps_client import PSClient
from geofed.codec import make_codec
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed.protocol.messages import manifest_to_proto

MANIFEST = [("h.weight", (60, 50), "float32"), ("h.bias", (50,), "float32")]
NUMEL = 60 * 50 + 50


def theta0(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(NUMEL).astype(np.float32)


def mint(ps, client_id: str, master: bool = False, ttl_s: float = 0.0) -> str:
    with ps.admin() as admin:
        return admin.create_token(client_id, ttl_s=ttl_s, master=master)[0]


def join_client(ps, client_id: str, master: bool = False, state_dir=None) -> PSClient:
    token = mint(ps, client_id, master)
    c = PSClient(ps.address, client_id, lambda: token, insecure=True, state_dir=state_dir)
    c.join()
    c.start()
    return c


def push(client: PSClient, base: int, values: np.ndarray, *, codec: str = "fp32", tokens: int = 100, steps: int = 1,
         **kw):
    header, frames = make_codec(codec).encode(np.ascontiguousarray(values, dtype=np.float32))
    return client.push(base_version=base, codec_header=header, frames=frames, num_tokens=tokens, local_steps=steps,
                       **kw)


def init_model(master: PSClient, values: np.ndarray | None = None, base: int = 0):
    values = theta0() if values is None else values
    return push(master, base, values, init=True, manifest=MANIFEST)


def raw_session(ps, client_id: str, master: bool = False) -> tuple[pb_grpc.ParameterServerStub, str]:
    stub = pb_grpc.ParameterServerStub(ps.channel())
    r = stub.Join(pb.JoinRequest(token=mint(ps, client_id, master), client_id=client_id), timeout=10)
    return stub, r.session


def fetch_model(stub, session: str, timeout: float = 20.0) -> tuple[int, bytes]:
    """Read one complete model version from a fresh StreamModel call."""
    call = stub.StreamModel(pb.StreamModelRequest(), metadata=bearer(session), timeout=timeout)
    buf = bytearray()
    for chunk in call:
        buf += chunk.data
        if chunk.offset + len(chunk.data) == chunk.total_bytes:
            assert hashlib.sha256(buf).digest() == chunk.sha256
            call.cancel()
            return chunk.version, bytes(buf)
    raise AssertionError("stream ended before a whole model arrived")


def raw_push(stub, session: str, messages: list[pb.DeltaChunk]) -> pb.PushResult:
    return stub.PushDelta(iter(messages), metadata=bearer(session), timeout=20)


def delta_messages(header_bytes: bytes, payload: bytes, *, base: int, upload_id: str = "u1", chunk: int = 4096,
                   declared: int | None = None, sha: bytes | None = None, init: bool = False,
                   manifest=None) -> list[pb.DeltaChunk]:
    h = pb.DeltaHeader(base_version=base, upload_id=upload_id, codec_header=header_bytes,
                       payload_bytes=len(payload) if declared is None else declared, num_tokens=10, init=init)
    if manifest:
        h.manifest.extend(manifest_to_proto(manifest))
    msgs = [pb.DeltaChunk(header=h)]
    for off in range(0, len(payload), chunk):
        msgs.append(pb.DeltaChunk(payload=pb.DeltaPayload(offset=off, data=payload[off : off + chunk])))
    digest = sha if sha is not None else hashlib.sha256(payload).digest()
    msgs.append(pb.DeltaChunk(trailer=pb.DeltaTrailer(sha256=digest)))
    return msgs


def encoded(values: np.ndarray, codec: str = "fp32") -> tuple[bytes, bytes]:
    header, frames = make_codec(codec).encode(np.ascontiguousarray(values, dtype=np.float32))
    return header, b"".join(frames)


def rpc_code(fn) -> tuple[grpc.StatusCode, str]:
    try:
        fn()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    raise AssertionError("call succeeded but an error was expected")
