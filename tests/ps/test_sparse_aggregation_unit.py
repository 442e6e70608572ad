"""The sparse mode at the PS (issue 16): pushes are folded from their nonzeros only, the round's mean equals
a dense reference, a payload outside the federation's sparse settings is refused with nothing applied, and
a client rebuilding each published version from the sparse downlink ends bit-identical to the PS's model."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from client_agent.paradigms.pretrain import Pretrain as ClientPretrain
from geofed.codec import decoder_for, make_codec
from geofed.codec.sparse_params import SparseParams
from geofed.config import FederationConfig
from geofed.paradigms import PretrainSettings
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.norm_bound import BoundedPayload
from ps_server.aggregation.sites import FixedSites
from ps_server.errors import InvalidPush
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, PushReceiver, ReceivedPush

N = 3 * 1024 + 200
CLIENTS = ("c.a", "c.b", "c.c")
CLIENT_CODEC = SparseParams(1024, 20, 2, "rice")  # 2 % of every 1024 values: what the federation allows


def federation(mode: str = "sync") -> FederationConfig:
    return FederationConfig(
        codec={"name": "sparse", "sparse_density": 0.02, "sparse_chunk": 1024, "sparse_value_bits": 2},
        aggregation={"mode": mode, "quorum": 1.0, "buffer_size": 1, "outer_optimizer": "fedavg", "global_lr": 1.0,
                     "weighting": "uniform", "norm_bound_multiple": 0, "max_staleness": 64},
    )


def received(values: np.ndarray, codec, *, client="c.a", base=1, upload="u", init=False) -> ReceivedPush:
    header, frames = codec.encode(values, frame_elems=2048)
    payload = b"".join(frames)
    receiver = PushReceiver(client_id=client, expected_numel=None if init else N, max_upload_bytes=1 << 30,
                            max_init_numel=N)
    receiver.on_header(PushHeader(base_version=base, upload_id=upload, codec_header=header,
                                  payload_bytes=len(payload), num_tokens=100, local_steps=1, init=init,
                                  manifest=(TensorEntry("w", (N,), "float32"),) if init else ()))
    receiver.on_payload(0, payload)
    return receiver.on_trailer(hashlib.sha256(payload).digest())


def dense(push: ReceivedPush) -> np.ndarray:
    """The push decoded densely, frame by frame (the reference the sparse fold must match)."""
    dec = decoder_for(push.header.codec_header, max_numel=N)
    push.spool.seek(0)
    out = np.concatenate([v for _, v in dec.feed(push.spool.read())])
    dec.finish()
    return out


@pytest.fixture
def agg():
    fed = federation()
    assert fed.paradigm == PretrainSettings()
    a = Aggregator(fed, GlobalModel(), sites=FixedSites(len(CLIENTS)))
    a.initialise(received(np.random.default_rng(0).normal(size=N).astype(np.float32), make_codec("fp32"),
                          init=True, upload="init"))
    return a


def delta(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(3.0, N) * 1e-3).astype(np.float32)


def test_sparse_fold_equals_dense_mean_and_reads_only_nonzeros(agg, monkeypatch):
    pushes = [received(delta(i), make_codec("sparse", sparse=CLIENT_CODEC), client=c, upload=f"u{i}")
              for i, c in enumerate(CLIENTS)]
    reference = np.mean(np.stack([dense(p) for p in pushes]).astype(np.float64), axis=0)
    seen = {}
    apply = agg.strategy.apply
    monkeypatch.setattr(agg.strategy, "apply", lambda snap, rs: (seen.setdefault("mean", rs.delta.copy()),
                                                                   apply(snap, rs))[1])
    monkeypatch.setattr(ReceivedPush, "iter_values", lambda *a: pytest.fail("a sparse push was folded densely"))
    outcomes = [agg.submit(p) for p in pushes]
    assert [o.status for o in outcomes] == ["ACCEPTED", "ACCEPTED", "APPLIED"]
    np.testing.assert_allclose(seen["mean"], reference, rtol=1e-6, atol=1e-12)
    assert np.count_nonzero(seen["mean"]) <= 3 * 4 * 20  # the union of three clients' 2 %


def test_norm_bound_scales_the_decoded_sparse_values():
    push = received(delta(7), make_codec("sparse", sparse=CLIENT_CODEC))
    full = {int(i): v for pos, vals in push.iter_sparse(N) for i, v in zip(pos, vals, strict=True)}
    half = {int(i): v for pos, vals in BoundedPayload(push, 0.5).iter_sparse(N) for i, v in zip(pos, vals, strict=True)}
    assert full.keys() == half.keys() and len(full) == 4 * 20
    assert all(np.float32(full[i] * 0.5) == half[i] for i in full)
    np.testing.assert_allclose(np.sqrt(sum(float(v) ** 2 for v in full.values())), push.norm, rtol=1e-6)


@pytest.mark.parametrize(("codec", "match"), [
    (make_codec("sparse", sparse=SparseParams(1024, 21, 2, "rice")), "density"),
    (make_codec("sparse", sparse=SparseParams(1024, 20, 4, "rice")), "4-bit"),
    (make_codec("int8"), "not accepted"),
])
def test_a_push_outside_the_federations_sparse_settings_is_refused_and_nothing_applied(agg, codec, match):
    before = agg.model.current()
    with pytest.raises(InvalidPush, match=match) as err:
        agg.submit(received(delta(1), codec))
    assert err.value.reason == "codec_policy"
    assert agg.model.current() is before and agg.buffered == 0
    ok = agg.submit(received(delta(2), make_codec("sparse", sparse=CLIENT_CODEC), upload="u2"))  # still takes
    assert ok.status == "ACCEPTED"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_clients_rebuild_every_published_version_bit_for_bit(mode):
    fed = federation(mode)
    agg = Aggregator(fed, GlobalModel(), sites=FixedSites(len(CLIENTS)))
    agg.initialise(received(np.random.default_rng(0).normal(size=N).astype(np.float32), make_codec("fp32"),
                            init=True, upload="init"))
    snaps = {1: agg.model.current()}
    decode = ClientPretrain(fed.paradigm).downlink_decoders()["sparse_delta"]
    codec = make_codec("sparse", sparse=CLIENT_CODEC)
    for r in range(4):
        for i, c in enumerate(CLIENTS):
            base = agg.model.version if mode == "async" else snaps[max(snaps)].version
            agg.submit(received(delta(10 * r + i), codec, client=c, base=base, upload=f"u{r}{i}"))
            snaps[agg.model.version] = agg.model.current()
    newest = snaps[max(snaps)]
    assert newest.version == (13 if mode == "async" else 5)
    for have in sorted(snaps)[:-1]:
        down = agg.downlink(newest, have)
        assert down.encoding == "sparse_delta" and down.base_version == have
        assert down.nbytes * 40 < (newest.version - have) * 4 * N  # each increment far below the fp32 vector
        got = decode(np.array(snaps[have].flat), bytes(down.data), have, newest.version)
        assert got.tobytes() == newest.flat.tobytes()
        assert hashlib.sha256(got.tobytes()).digest() == down.sha256
    assert agg.downlink(newest, 0).encoding == "fp32"  # a client holding nothing gets the whole vector


def test_server_residual_survives_a_checkpoint(agg):
    for i, c in enumerate(CLIENTS):
        agg.submit(received(delta(i), make_codec("sparse", sparse=CLIENT_CODEC), client=c, upload=f"u{i}"))
    state = agg.state_dict()
    residual = state["strategy"]["server_residual"]
    assert np.count_nonzero(residual) > 0  # the re-sparsified increment left something behind
    fresh = Aggregator(federation(), GlobalModel(), sites=FixedSites(3))
    snap = agg.model.current()
    fresh.restore(snap.version, np.array(snap.flat), snap.manifest, state)
    assert np.array_equal(fresh.strategy.server_residual, residual)


def test_sparse_mode_refuses_settings_it_cannot_serve():
    from ps_server.aggregation.strategies import build_strategy

    with pytest.raises(ValueError, match="robust"):
        build_strategy(FederationConfig(codec={"name": "sparse"}, aggregation={"robust": "median"}))
    with pytest.raises(ValueError, match="paradigm"):
        build_strategy(FederationConfig(codec={"name": "sparse"}, paradigm={"name": "bitfit"}))
