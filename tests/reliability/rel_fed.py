"""Tiny numpy "clients" over the real wire, and the independent ledger check of the global model.

The global model must always be a state the aggregation rule can produce. With FedAvg, η = 1, uniform
weights, no staleness discount and K = 1 (`EXACT_ASYNC`) every applied delta adds itself once:
θ_v = θ_0 + Σ_applied δ. Each test delta is a distinct random vector, so least squares over every
delta a test ever *tried* to send recovers how often each one landed: 1 (applied), 0 (never arrived),
anything else is corruption or a double application. This needs nothing from the PS but its model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from client_agent.ps_client import PSClient, PushReceipt
from geofed.codec import make_codec
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer

# Every applied delta is added as-is: θ ← θ + δ (Algorithm 1 with η = 1, one delta per outer step).
EXACT_ASYNC = {
    "aggregation": {"mode": "async", "buffer_size": 1, "outer_optimizer": "fedavg", "global_lr": 1.0,
                    "weighting": "uniform", "staleness_exponent": 0.0, "max_staleness": 1_000_000},
}
DELTA_SCALE = 0.01


def manifest_for(numel: int) -> list[tuple[str, tuple[int, ...], str]]:
    return [("w", (numel,), "float32")]


def theta0(numel: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(numel).astype(np.float32)


def delta_for(tag: str, numel: int) -> np.ndarray:
    """A reproducible random delta named by `tag` (client/round/base), so any process can rebuild it."""
    seed = int.from_bytes(hashlib.sha256(tag.encode()).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(numel) * DELTA_SCALE).astype(np.float32)


def mint(ps, client_id: str, master: bool = False, ttl_s: float = 0.0) -> str:
    with ps.admin() as admin:
        return admin.create_token(client_id, ttl_s=ttl_s, master=master)[0]


def join(ps, client_id: str, *, master: bool = False, address: str | None = None, state_dir: Path | None = None,
         start: bool = True, reaper=None, **kw) -> PSClient:
    """A joined `PSClient` (model stream running when `start`), closed by `reaper` if given."""
    token = mint(ps, client_id, master)
    client = PSClient(address or ps.address, client_id, lambda: token, insecure=ps.tls is None,
                      ca_cert=ps.tls.ca.read_bytes() if ps.tls else None, state_dir=state_dir, **kw)
    if reaper is not None:
        reaper.add(client.close)
    client.join()
    if start:
        client.start()
    return client


def push_values(client: PSClient, base: int, values: np.ndarray, codec: str = "fp32", **kw) -> PushReceipt:
    header, frames = make_codec(codec).encode(np.ascontiguousarray(values, dtype=np.float32))
    return client.push(base_version=base, codec_header=header, frames=frames, num_tokens=kw.pop("tokens", 100),
                       **kw)


def init_model(master: PSClient, values: np.ndarray) -> PushReceipt:
    return push_values(master, 0, values, init=True, manifest=manifest_for(values.size))


def fetch_model(stub: pb_grpc.ParameterServerStub, session: str, timeout: float = 30.0) -> tuple[int, np.ndarray]:
    """One complete, checksum-verified model version from a fresh StreamModel call."""
    call = stub.StreamModel(pb.StreamModelRequest(), metadata=bearer(session), timeout=timeout)
    buf = bytearray()
    try:
        for chunk in call:
            buf += chunk.data
            if chunk.offset + len(chunk.data) == chunk.total_bytes:
                if hashlib.sha256(buf).digest() != chunk.sha256:
                    raise AssertionError("model checksum mismatch")
                return chunk.version, np.frombuffer(bytes(buf), dtype=np.float32).copy()
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
            return fetch_model(stub, r.session)
        finally:
            channel.close()


@dataclass
class Accounting:
    """How often each attempted delta is in the model, by least squares against θ_0."""

    coefficients: dict[str, float]
    residual: float  # ||model - θ0 - Σ c·δ|| / ||model - θ0||
    applied: set[str] = field(default_factory=set)
    twice: set[str] = field(default_factory=set)  # coefficient near 2 or more: applied more than once
    stray: set[str] = field(default_factory=set)  # neither 0 nor 1: not a state the rule can produce

    def lost(self, receipted: set[str]) -> set[str]:
        """Deltas the PS acknowledged that are not in the model."""
        return receipted - self.applied


def account(model: np.ndarray, base: np.ndarray, candidates: dict[str, np.ndarray], tol: float = 1e-3) -> Accounting:
    """Decompose `model - base` over `candidates` (an independent recomputation of the aggregation)."""
    diff = model.astype(np.float64) - base.astype(np.float64)
    keys = sorted(candidates)
    if not keys:
        return Accounting({}, float(np.linalg.norm(diff)))
    basis = np.stack([candidates[k].astype(np.float64) for k in keys], axis=1)
    coef, *_ = np.linalg.lstsq(basis, diff, rcond=None)
    rest = diff - basis @ coef
    scale = max(float(np.linalg.norm(diff)), 1e-12)
    acc = Accounting(dict(zip(keys, coef.tolist(), strict=True)), float(np.linalg.norm(rest)) / scale)
    for k, c in acc.coefficients.items():
        if abs(c - 1) <= tol:
            acc.applied.add(k)
        elif c >= 2 - tol:
            acc.twice.add(k)
        elif abs(c) > tol:
            acc.stray.add(k)
    return acc
