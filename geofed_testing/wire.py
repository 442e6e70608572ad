"""Talk to a PS the way a tiny numpy client would: join, push encoded deltas, read the model, or send raw
`PushDelta` messages of any shape (well-formed or not) over the real gRPC wire.

`ps` below is anything with `address`, `admin()`, `channel()` and `tls` (a `geofed_testing.procs.PSNode`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np

from client_agent.connection.model_transfer import ChunkDamaged, ModelAssembler, TransferRestart
from client_agent.connection.ps_client import PSClient, PushReceipt
from geofed.codec import make_codec
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed.protocol.messages import manifest_to_proto

# The default test model: two tensors, so a manifest of more than one entry goes over the wire.
MANIFEST = [("h.weight", (60, 50), "float32"), ("h.bias", (50,), "float32")]
NUMEL = 60 * 50 + 50


def manifest_for(numel: int) -> list[tuple[str, tuple[int, ...], str]]:
    """A one-tensor manifest of `numel` parameters."""
    return [("w", (numel,), "float32")]


def theta0(numel: int = NUMEL, seed: int = 0) -> np.ndarray:
    """A reproducible initial model."""
    return np.random.default_rng(seed).standard_normal(numel).astype(np.float32)


def mint(ps, client_id: str, master: bool = False, ttl_s: float = 0.0, site: str = "") -> str:
    """A one-time join token from the PS's admin surface (for `site`, when given)."""
    with ps.admin() as admin:
        return admin.create_token(client_id, site=site, ttl_s=ttl_s, master=master)[0]


def join(ps, client_id: str, *, master: bool = False, address: str | None = None, state_dir: Path | None = None,
         start: bool = True, reaper=None, site: str = "", **kw) -> PSClient:
    """A joined `PSClient` (model stream running when `start`), closed by `reaper` if given."""
    token = mint(ps, client_id, master, site=site)
    client = PSClient(address or ps.address, client_id, lambda: token, insecure=ps.tls is None,
                      ca_cert=ps.tls.ca.read_bytes() if ps.tls else None, state_dir=state_dir, **kw)
    if reaper is not None:
        reaper.add(client.close)
    client.join()
    if start:
        client.start()
    return client


def push(client: PSClient, base: int, values: np.ndarray, *, codec: str = "fp32", tokens: int = 100, **kw
         ) -> PushReceipt:
    """Encode `values` with `codec` and push them as a delta on version `base`."""
    header, frames = make_codec(codec).encode(np.ascontiguousarray(values, dtype=np.float32))
    return client.push(base_version=base, codec_header=header, frames=frames, num_tokens=tokens, **kw)


def init_model(master: PSClient, values: np.ndarray | None = None) -> PushReceipt:
    """The master's bootstrap: Θ0 of the default test model, or `values` as one flat tensor."""
    if values is None:
        return push(master, 0, theta0(), init=True, manifest=MANIFEST)
    return push(master, 0, values, init=True, manifest=manifest_for(values.size))


def raw_session(ps, client_id: str, master: bool = False) -> tuple[pb_grpc.ParameterServerStub, str]:
    """A bare stub and the session of a fresh Join (no PSClient in between)."""
    stub = pb_grpc.ParameterServerStub(ps.channel())
    r = stub.Join(pb.JoinRequest(token=mint(ps, client_id, master), client_id=client_id), timeout=10)
    return stub, r.session


def fetch_model(stub: pb_grpc.ParameterServerStub, session: str, timeout: float = 30.0) -> tuple[int, bytes]:
    """One complete, checksum-verified model version (its raw fp32 bytes) from a fresh StreamModel call.

    The PS sends a client holding nothing the whole vector, in fp32 or coded (see `ModelAssembler`)."""
    call = stub.StreamModel(pb.StreamModelRequest(), metadata=bearer(session), timeout=timeout)
    assembler = ModelAssembler()
    try:
        for chunk in call:
            try:
                got = assembler.take(chunk, None)
            except (ChunkDamaged, TransferRestart) as exc:
                raise AssertionError(f"model checksum mismatch: {exc}") from exc
            if got is not None:
                return got.version, got.flat.tobytes()
    finally:
        call.cancel()
    raise AssertionError("stream ended before a whole model arrived")


class Observer:
    """Reads the PS's current global model through the public wire, re-joining as needed (PS restarts)."""

    def __init__(self, ps, client_id: str = "observer.0") -> None:
        self.ps, self.client_id = ps, client_id

    def model(self) -> tuple[int, np.ndarray]:
        channel = self.ps.channel()
        try:
            stub = pb_grpc.ParameterServerStub(channel)
            r = stub.Join(pb.JoinRequest(token=mint(self.ps, self.client_id), client_id=self.client_id), timeout=15)
            version, data = fetch_model(stub, r.session)
            return version, np.frombuffer(data, dtype=np.float32).copy()
        finally:
            channel.close()


def encoded(values: np.ndarray, codec: str = "fp32") -> tuple[bytes, bytes]:
    """Codec header and the whole encoded payload of `values`."""
    header, frames = make_codec(codec).encode(np.ascontiguousarray(values, dtype=np.float32))
    return header, b"".join(frames)


def delta_messages(header: bytes, payload: bytes, *, base: int = 1, upload_id: str = "u1", chunk: int = 4096,
                   declared: int | None = None, sha: bytes | None = None, manifest=None,
                   **fields) -> list[pb.DeltaChunk]:
    """A `PushDelta` stream: header, payload chunks, SHA-256 trailer; every part can be made to lie.

    `declared` overrides the payload size the header claims, `sha` the trailer's digest; `manifest` takes
    (name, shape, dtype) triples; other `fields` go to the DeltaHeader as they are (e.g. `init=True`).
    """
    h = pb.DeltaHeader(base_version=base, upload_id=upload_id, codec_header=header, num_tokens=10,
                       payload_bytes=len(payload) if declared is None else declared, **fields)
    if manifest:
        h.manifest.extend(manifest_to_proto(manifest))
    msgs = [pb.DeltaChunk(header=h)]
    msgs += [pb.DeltaChunk(payload=pb.DeltaPayload(offset=off, data=payload[off : off + chunk]))
             for off in range(0, len(payload), chunk)]
    digest = hashlib.sha256(payload).digest() if sha is None else sha
    msgs.append(pb.DeltaChunk(trailer=pb.DeltaTrailer(sha256=digest)))
    return msgs


def raw_push(stub: pb_grpc.ParameterServerStub, session: str, messages: list[pb.DeltaChunk]) -> pb.PushResult:
    return stub.PushDelta(iter(messages), metadata=bearer(session), timeout=20)


def rpc_code(fn: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The status code and details of a call that must fail."""
    try:
        fn()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    raise AssertionError("call succeeded but an error was expected")
