"""A real PS process, real gRPC clients: the new global model equals an independent recomputation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client_agent.connection.ps_client import PushError, StaleDeltaError
from geofed_testing.procs import PSNode
from geofed_testing.wire import (
    MANIFEST,
    NUMEL,
    delta_messages,
    encoded,
    init_model,
    join,
    push,
    raw_push,
    raw_session,
    theta0,
)


@pytest.fixture
def make_ps(tmp_path):
    procs = []

    def make(federation: dict, name: str = "ps", extra=None) -> PSNode:
        # These tests compare what clients receive with the aggregation maths, so the PS streams its exact
        # vector; the compressed stream (published on grids) has its own tests in test_model_stream_e2e.py.
        federation = {"downlink": {"encoding": "fp32"}, **federation}
        ps = PSNode(tmp_path / name, federation, extra=extra).start()
        procs.append(ps)
        return ps

    yield make
    for ps in procs:
        ps.kill()


def _close(*clients):
    for c in clients:
        c.close()


def _deltas(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(NUMEL) * 0.01).astype(np.float32) for _ in range(n)]


def test_master_bootstrap_then_sync_fedavg_round_matches_weighted_mean(make_ps):
    ps = make_ps({"aggregation": {"mode": "sync", "outer_optimizer": "fedavg", "global_lr": 0.7,
                                  "straggler_timeout_s": 60}})
    master = join(ps, "a.master", master=True)
    assert master.master, "the first master-token client of an empty PS must bootstrap"
    receipt = init_model(master)
    assert (receipt.status, receipt.version) == ("APPLIED", 1)
    others = [join(ps, f"a.c{i}") for i in (1, 2)]
    clients = [master, *others]
    for c in clients:
        assert c.wait_for_version(0, timeout=20).version == 1
    deltas, tokens = _deltas(3), [100, 300, 600]

    statuses = [push(c, 1, d, tokens=t).status for c, d, t in zip(clients, deltas, tokens, strict=True)]

    assert statuses == ["ACCEPTED", "ACCEPTED", "APPLIED"]  # the third on-time delta closes the round
    expected = theta0() + 0.7 * sum(t * d for d, t in zip(deltas, tokens, strict=True)) / sum(tokens)
    for c in clients:
        got = c.wait_for_version(1, timeout=20)
        assert got.version == 2
        np.testing.assert_allclose(got.flat, expected, rtol=1e-5, atol=1e-6)
        assert [(t.name, t.shape, t.dtype) for t in got.manifest] == [(n, s, d) for n, s, d in MANIFEST]
    _close(*clients)


def test_nesterov_outer_steps_match_torch_sgd(make_ps):
    ps = make_ps({"aggregation": {"mode": "sync", "outer_optimizer": "nesterov", "global_lr": 0.7, "momentum": 0.9,
                                  "weighting": "uniform"}})
    a = join(ps, "n.a", master=True)
    init_model(a)
    b = join(ps, "n.b")
    param = torch.nn.Parameter(torch.from_numpy(theta0().copy()))
    reference = torch.optim.SGD([param], lr=0.7, momentum=0.9, nesterov=True)
    version = 1
    for rnd in range(3):
        for c in (a, b):
            c.wait_for_version(version - 1, timeout=20)
        da, db = _deltas(2, seed=10 + rnd)
        push(a, version, da)
        assert push(b, version, db).status == "APPLIED"
        param.grad = -torch.from_numpy((da + db) / 2)  # DiLoCo: the outer gradient is minus the mean delta
        reference.step()
        version += 1
        got = a.wait_for_version(version - 1, timeout=20)
        assert got.version == version
        np.testing.assert_allclose(got.flat, param.detach().numpy(), rtol=1e-5, atol=1e-6)
    _close(a, b)


def test_async_stale_delta_downweighted_and_too_stale_refused(make_ps):
    ps = make_ps({"aggregation": {"mode": "async", "buffer_size": 1, "max_staleness": 1, "staleness_exponent": 0.5,
                                  "weighting": "uniform", "global_lr": 1.0}})
    a = join(ps, "s.a", master=True)
    init_model(a)
    b, c = join(ps, "s.b"), join(ps, "s.c")
    da, db, dc = _deltas(3, seed=7)

    assert push(a, 1, da).version == 2  # fresh: applied at full weight
    rb = push(b, 1, db)  # one version behind: scaled by (1 + 1) ** -0.5 even though it is applied alone (K = 1)
    assert (rb.status, rb.version, rb.staleness) == ("APPLIED", 3, 1)
    assert rb.weight == pytest.approx(2**-0.5)
    expected = theta0() + da + 2**-0.5 * db
    got = c.wait_for_version(2, timeout=20)
    np.testing.assert_allclose(got.flat, expected, rtol=1e-5, atol=1e-6)

    with pytest.raises(StaleDeltaError, match="2 versions behind"):
        push(c, 1, dc)
    with ps.admin() as admin:
        assert admin.status()["version"] == 3
    _close(a, b, c)


def test_async_buffer_of_two_waits_then_applies_staleness_weighted_mean(make_ps):
    ps = make_ps({"aggregation": {"mode": "async", "buffer_size": 2, "buffer_timeout_s": 60, "weighting": "tokens",
                                  "global_lr": 1.0}})
    a = join(ps, "k.a", master=True)
    init_model(a)
    b = join(ps, "k.b")
    da, db = _deltas(2, seed=3)
    assert push(a, 1, da, tokens=200).status == "ACCEPTED"
    assert push(b, 1, db, tokens=600).status == "APPLIED"
    got = a.wait_for_version(1, timeout=20)
    np.testing.assert_allclose(got.flat, theta0() + (200 * da + 600 * db) / 800, rtol=1e-5, atol=1e-6)
    _close(a, b)


def test_quantized_int8_huffman_delta_lands_within_half_a_step(make_ps):
    ps = make_ps({"aggregation": {"mode": "async", "buffer_size": 1, "global_lr": 1.0}})
    a = join(ps, "q.a", master=True)
    init_model(a)
    (d,) = _deltas(1, seed=5)
    push(a, 1, d, codec="int8")
    got = a.wait_for_version(1, timeout=20)
    half_step = (d.max() - d.min()) / 255 / 2
    assert np.abs(got.flat - (theta0() + d)).max() <= half_step * 1.001 + 1e-6
    _close(a)


def test_sync_straggler_timeout_closes_round_without_the_slow_client(make_ps):
    ps = make_ps({"aggregation": {"mode": "sync", "straggler_timeout_s": 1.0, "weighting": "uniform",
                                  "global_lr": 1.0}})
    a = join(ps, "t.a", master=True)
    init_model(a)
    slow = join(ps, "t.slow")
    (d,) = _deltas(1, seed=9)
    assert push(a, 1, d).status == "ACCEPTED"  # 1 of 2 active clients: waits for the straggler ...
    got = a.wait_for_version(1, timeout=15)  # ... until T passes and the round closes without it
    assert got.version == 2
    np.testing.assert_allclose(got.flat, theta0() + d, rtol=1e-5, atol=1e-6)
    _close(a, slow)


def test_retried_upload_is_applied_once(make_ps):
    ps = make_ps({"aggregation": {"mode": "async", "buffer_size": 1, "global_lr": 1.0}})
    a = join(ps, "r.a", master=True)
    init_model(a)
    stub, session = raw_session(ps, "r.raw")
    (d,) = _deltas(1, seed=4)
    header, payload = encoded(d)
    first = raw_push(stub, session, delta_messages(header, payload, base=1, upload_id="same"))
    again = raw_push(stub, session, delta_messages(header, payload, base=1, upload_id="same"))
    assert first.version == 2
    assert again.status == 3 and again.version == 2  # DUPLICATE: nothing applied twice
    got = a.wait_for_version(1, timeout=20)
    np.testing.assert_allclose(got.flat, theta0() + d, rtol=1e-5, atol=1e-6)
    _close(a)


def test_init_only_by_master_and_only_once(make_ps):
    ps = make_ps({})
    plain = join(ps, "i.plain")
    assert not plain.master
    with pytest.raises(PushError, match="PERMISSION_DENIED"):
        init_model(plain)
    master = join(ps, "i.master", master=True)
    init_model(master)
    with pytest.raises(PushError, match="already initialised"):
        init_model(master)
    _close(plain, master)
