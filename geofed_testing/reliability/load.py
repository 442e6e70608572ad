"""Load: N concurrent clients, each its own gRPC connection, pushing real int8+Huffman deltas at one PS.

Nothing lost or double-counted is checked exactly, not statistically: with FedAvg, η = 1, uniform weights,
no staleness discount and K = 1 every acknowledged push adds its decoded delta once, and each client's
delta holds multiples of 2^-10 (symbols of a centred binomial, so Huffman has work to do), whose float32
sums are exact in any order. So the final model must equal Σ_clients receipts_c · decoded(δ_c) bit for bit,
and the version must be 1 + the number of receipts.

What a real client does that these pushers do not: a push the round share puts off (DEFERRED) is dropped and
the client retrains on the next version; here the pusher sends the same delta again 5 ms later, on the same
base, until the other sites' pushes open its round (the audit counts only acknowledged pushes, so it stays exact).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
import numpy as np

from client_agent.connection.ps_client import PSClient
from client_agent.errors import DeferredDeltaError
from geofed.codec import Codec, decoder_for, make_codec
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.channel import CHANNEL_OPTIONS
from geofed_testing.ledger import EXACT_ASYNC
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import Observer, init_model, join, mint

QUANTUM = np.float32(2.0**-10)


@dataclass
class LoadResult:
    """What one load run measured."""

    clients: int
    seconds: float
    numel: int
    codec: str
    payload_bytes: float  # mean encoded delta size
    pushes: int
    pushes_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    rss_start_mb: float
    rss_peak_mb: float
    rss_end_mb: float
    version: int
    exact: bool  # final model == Σ receipts · decoded deltas, bit for bit
    max_abs_error: float
    ledger_ok: bool  # the PS's per-client push counts == our receipts
    lost: int  # acknowledged pushes missing from the model (from the version count)
    double_counted: int
    deferred: int = 0  # pushes the round share put off (a site's round full until the other sites push)
    errors: list[str] = field(default_factory=list)
    per_second: list[int] = field(default_factory=list)  # receipts per wall-clock second

    def row(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in ("errors", "per_second")}


def client_delta(i: int, numel: int) -> np.ndarray:
    """Multiples of 2^-10 in [-128, 127]·2^-10 (both ends present, so the int8 grid is exactly 2^-10)."""
    q = np.random.default_rng(1000 + i).binomial(255, 0.5, numel).astype(np.float32)
    q[0], q[1] = 0, 255
    return (q - 128) * QUANTUM


def _own_connection(client: PSClient) -> None:
    """Give a client its own TCP connection (gRPC would otherwise share one between same-target channels)."""
    client.channel.close()
    client.channel = grpc.insecure_channel(
        client.address, options=[*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    )
    client.stub = pb_grpc.ParameterServerStub(client.channel)


def _decode(header: bytes, payload: bytes, numel: int) -> np.ndarray:
    out = np.empty(numel, np.float32)
    dec = decoder_for(header, max_numel=numel)
    for off, vals in dec.feed(payload):
        out[off : off + vals.size] = vals
    dec.finish()
    return out


def run_load(
    workdir: Path,
    reaper: Reaper,
    *,
    clients: int = 64,
    seconds: float = 10.0,
    numel: int = 100_000,
    codec: str = "int8",
    extra: list[str] | None = None,
) -> LoadResult:
    """Start a PS, join `clients` clients, push for `seconds`, then audit the model against the receipts."""
    ps = _start_ps(workdir, reaper, numel, extra)
    coder = make_codec(codec, "huffman")
    encoded = [_encode(coder, client_delta(i, numel), numel) for i in range(clients)]
    with ThreadPoolExecutor(16) as pool:
        conns = list(pool.map(lambda i: _connect(ps, reaper, i), range(clients)))
    pushes = _push_for(ps, conns, encoded, seconds)
    return _audit(ps, pushes, encoded, numel, coder.name)


def _start_ps(workdir: Path, reaper: Reaper, numel: int, extra: list[str] | None) -> PSNode:
    """A PS whose global model the master has bootstrapped to `numel` zeros."""
    ps = PSNode(workdir / "ps", EXACT_ASYNC, extra=extra, rate_limit=100_000.0)
    reaper.add(ps.kill)
    ps.start()
    master = join(ps, "load.master", master=True, start=False, reaper=reaper)
    init_model(master, np.zeros(numel, np.float32))
    master.close()
    return ps


def _encode(coder: Codec, delta: np.ndarray, numel: int) -> tuple[bytes, list[bytes], np.ndarray]:
    """`delta` encoded (its header and frames) and decoded again, as the PS will add it."""
    header, frames = coder.encode(delta)
    frames = list(frames)
    return header, frames, _decode(header, b"".join(frames), numel)


def _connect(ps: PSNode, reaper: Reaper, i: int) -> PSClient:
    """Client i joined, on its own connection."""
    token = mint(ps, f"load.c{i:03d}")
    c = PSClient(ps.address, f"load.c{i:03d}", lambda: token, insecure=True, rpc_timeout_s=60)
    reaper.add(c.close)
    _own_connection(c)
    c.join()
    return c


@dataclass
class _Pushes:
    """What the pushers and the PS's memory sampler recorded during one load run."""

    latencies: list[list[float]]  # per client, the seconds of each acknowledged push
    deferred: list[int]  # per client, the pushes the round share put off
    rss: list[int]  # the PS's resident memory, sampled
    done_at: list[float] = field(default_factory=list)  # when each push was acknowledged (monotonic)
    errors: list[str] = field(default_factory=list)
    t_start: float = 0.0  # when the pushers were released (monotonic)
    elapsed: float = 0.0  # seconds from the release until the pushers were joined


def _push_for(ps: PSNode, conns: list[PSClient], encoded: list[tuple], seconds: float) -> _Pushes:
    """Every client pushes its delta over and over, from the same moment, for `seconds`, each on the version its
    last push made; the PS's memory is sampled meanwhile."""
    clients = len(conns)
    pushes = _Pushes(latencies=[[] for _ in range(clients)], deferred=[0] * clients, rss=[ps.rss_bytes()])
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def pusher(i: int) -> None:
        header, frames, _ = encoded[i]
        base = 1
        start.wait()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                r = conns[i].push(base_version=base, codec_header=header, frames=frames, num_tokens=1)
            except DeferredDeltaError:  # the site's round is full: push again once the other sites have
                pushes.deferred[i] += 1
                time.sleep(0.005)
                continue
            except Exception as exc:  # recorded and reported: a load run must show every failure
                pushes.errors.append(f"c{i}: {type(exc).__name__}: {exc}")
                return
            pushes.latencies[i].append(time.perf_counter() - t0)
            pushes.done_at.append(time.monotonic())
            base = r.version

    def sample_rss() -> None:
        while not stop.wait(0.25):
            pushes.rss.append(ps.rss_bytes())

    threads = [threading.Thread(target=pusher, args=(i,), daemon=True) for i in range(clients)]
    threads.append(threading.Thread(target=sample_rss, daemon=True))
    for t in threads:
        t.start()
    start.wait()
    pushes.t_start = time.monotonic()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    pushes.elapsed = time.monotonic() - pushes.t_start
    pushes.rss.append(ps.rss_bytes())
    return pushes


def _audit(ps: PSNode, pushes: _Pushes, encoded: list[tuple], numel: int, codec: str) -> LoadResult:
    """The run's measurements, and the PS's model, version and push counts checked against the receipts."""
    latencies, rss, elapsed = pushes.latencies, pushes.rss, pushes.elapsed
    receipts = [len(lat) for lat in latencies]
    expected = np.zeros(numel, np.float32)
    for n, (_, _, decoded) in zip(receipts, encoded, strict=True):
        expected += np.float32(n) * decoded
    version, model = Observer(ps, "load.observer").model()
    with ps.admin() as admin:
        counted = {c["client_id"]: c["pushes"] for c in admin.list_clients()}
    all_lat = np.sort(np.concatenate([np.asarray(lat) for lat in latencies if lat]) * 1e3)
    total = sum(receipts)
    done_at = pushes.done_at
    per_second = (
        np.bincount(np.floor(np.asarray(done_at) - pushes.t_start).clip(0).astype(int)).tolist() if done_at else []
    )
    applied = version - 1
    return LoadResult(
        clients=len(latencies),
        seconds=elapsed,
        numel=numel,
        codec=codec,
        payload_bytes=float(np.mean([len(h) + sum(map(len, f)) for h, f, _ in encoded])),
        pushes=total,
        pushes_per_s=total / elapsed,
        p50_ms=float(np.percentile(all_lat, 50)) if total else 0.0,
        p99_ms=float(np.percentile(all_lat, 99)) if total else 0.0,
        max_ms=float(all_lat[-1]) if total else 0.0,
        rss_start_mb=rss[0] / 2**20,
        rss_peak_mb=max(rss) / 2**20,
        rss_end_mb=rss[-1] / 2**20,
        version=version,
        exact=bool(np.array_equal(model, expected)),
        max_abs_error=float(np.abs(model.astype(np.float64) - expected).max()),
        ledger_ok=all(counted.get(f"load.c{i:03d}", 0) == n for i, n in enumerate(receipts)),
        lost=max(0, total - applied),
        double_counted=max(0, applied - total),
        deferred=sum(pushes.deferred),
        errors=pushes.errors,
        per_second=per_second,
    )
