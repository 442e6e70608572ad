"""A real PS process and real clients: the compressed model stream ends every client on the PS's bytes."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.auth import bearer
from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, Observer, init_model, join, push, raw_session, theta0


@pytest.fixture
def ps(tmp_path):
    node = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1, "global_lr": 1.0,
                                                    "weighting": "uniform", "max_staleness": 8},
                                    "downlink": {"encoding": "grid_delta", "history": 8}}).start()
    yield node
    node.kill()


def _delta(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(3.0, NUMEL) * 1e-3).astype(np.float32)


def test_clients_end_bit_identical_to_the_published_model_and_pull_less_than_fp32(ps):
    # Prepare
    master = join(ps, "m.a", master=True)
    init_model(master)
    clients = [master, join(ps, "m.b"), join(ps, "m.c")]
    for c in clients:
        assert c.wait_for_version(0, timeout=20).version == 1
    expected = theta0().astype(np.float64)

    # Execute: six async versions, every client following the stream
    for k in range(6):
        d = _delta(k)
        assert push(clients[k % 3], 1 + k, d).status == "APPLIED"
        expected += d
        for c in clients:
            assert c.wait_for_version(1 + k, timeout=20).version == 2 + k

    # Assert
    final = [c.latest().flat for c in clients]
    version, published = Observer(ps).model()
    assert version == 7
    for flat in final:
        assert np.array_equal(flat.view(np.uint32), published.view(np.uint32))
    np.testing.assert_allclose(published, expected, atol=2e-4)  # within a grid step of the true model
    fp32_pulls = 7 * NUMEL * 4
    for c in clients:
        assert c.bytes_received < 0.6 * fp32_pulls
    for c in clients:
        c.close()


def test_a_client_whose_version_the_ps_no_longer_keeps_gets_the_whole_vector(ps):
    master = join(ps, "h.a", master=True)
    init_model(master)
    for k in range(9):  # version 10: the history of 8 no longer holds version 1
        assert push(master, 1 + k, _delta(10 + k)).status == "APPLIED"
        master.wait_for_version(1 + k, timeout=20)  # the PS publishes (grids) each version as it is asked for
    stub, session = raw_session(ps, "h.old")

    call = stub.StreamModel(pb.StreamModelRequest(have_version=1), metadata=bearer(session), timeout=20)
    try:
        first = next(iter(call))
    finally:
        call.cancel()

    assert first.version == 10 and first.base_version == 0  # the whole vector, not a difference
    assert first.total_bytes <= NUMEL * 4
    master.close()


def test_an_on_demand_client_receives_one_difference_to_the_newest_not_every_version(ps):
    # Prepare: one client follows every version (prefetch), one fetches only when it waits
    master = join(ps, "d.m", master=True)
    init_model(master)
    eager, lazy = join(ps, "d.eager"), join(ps, "d.lazy")
    eager.on_demand = False
    assert push(master, 1, _delta(19)).status == "APPLIED"  # past Θ0's finer grid
    for c in (eager, lazy):
        assert c.wait_for_version(1, timeout=20).version == 2
    start = {c: c.bytes_received for c in (eager, lazy)}

    # Execute: five versions while `lazy` does not wait, then both want the newest
    for k in range(5):
        assert push(master, 2 + k, _delta(20 + k)).status == "APPLIED"
        assert eager.wait_for_version(2 + k, timeout=20).version == 3 + k
    got = lazy.wait_for_version(6, timeout=20)

    # Assert
    assert got.version == 7
    assert np.array_equal(got.flat.view(np.uint32), eager.latest().flat.view(np.uint32))
    eager_bytes, lazy_bytes = (c.bytes_received - start[c] for c in (eager, lazy))
    assert lazy_bytes < 0.5 * eager_bytes  # one difference instead of five
    for c in (master, eager, lazy):
        c.close()


def test_a_one_transfer_stream_ends_after_its_transfer_and_sends_no_newer_version(ps):
    # Prepare: versions 1 and 2 exist; a raw session asks for one transfer from version 1
    master = join(ps, "o.m", master=True)
    init_model(master)
    assert push(master, 1, _delta(31)).status == "APPLIED"
    master.wait_for_version(1, timeout=20)
    stub, session = raw_session(ps, "o.lazy")

    # Execute: read the whole stream, publishing version 3 as soon as the first chunk of version 2 arrives
    versions, offsets, total = [], [], None
    for chunk in stub.StreamModel(pb.StreamModelRequest(have_version=1, one_transfer=True),
                                  metadata=bearer(session), timeout=20):
        if not versions:
            assert push(master, 2, _delta(32)).status == "APPLIED"
            master.wait_for_version(2, timeout=20)  # version 3 is published while the stream is open
        versions.append(chunk.version)
        offsets.append(chunk.offset)
        total = chunk.total_bytes

    # Assert: the iterator ended by itself (no timeout), with version 2's bytes whole and nothing of version 3
    assert set(versions) == {2}
    assert offsets[0] == 0 and total is not None
    assert master.latest().version == 3
    master.close()
