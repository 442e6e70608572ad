"""Ring all-reduce between PSs over an in-memory transport: the maths, exclusion, and never half-applied."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from geofed.codec import CodecError
from ps_server.aggregation.reducer import ReduceFailed
from ps_server.aggregation.ring import (
    COMMITTED,
    PeerError,
    RingMessage,
    RingReducer,
    RingRefused,
    chunk_bounds,
    decode_chunk,
    encode_chunk,
)
from ps_server.aggregation.strategy import RoundSum


class FakeNet:
    """Delivers ring messages between reducers in this process; a group can be made dead or stalled."""

    def __init__(self) -> None:
        self.nodes: dict[str, RingReducer] = {}
        self.dead: set[str] = set()
        self.stalled: set[str] = set()
        self.sent: list[RingMessage] = []
        self.die_after: dict[str, int] = {}  # group -> messages it sends before it dies

    def transport(self, me: str) -> FakeTransport:
        return FakeTransport(self, me)


class FakeTransport:
    def __init__(self, net: FakeNet, me: str) -> None:
        self.net, self.me = net, me

    def _reach(self, peer: str, timeout: float) -> RingReducer:
        if self.me in self.net.dead:
            raise SystemExit  # this PS died: its thread ends here
        if peer in self.net.dead:
            raise PeerError(peer, "unreachable", "connection refused")
        if peer in self.net.stalled:
            time.sleep(timeout)
            raise PeerError(peer, "unreachable", "deadline exceeded")
        return self.net.nodes[peer]

    def send(self, peer: str, msg: RingMessage, timeout: float) -> None:
        node = self._reach(peer, timeout)
        left = self.net.die_after.get(self.me)
        if left is not None:
            if left == 0:
                self.net.dead.add(self.me)
                raise SystemExit
            self.net.die_after[self.me] = left - 1
        self.net.sent.append(msg)
        try:
            node.deliver(msg)
        except RingRefused as exc:
            raise PeerError(peer, exc.kind, exc.message, exc.version) from exc

    def abort(self, peer, key, timeout):
        return self._reach(peer, timeout).abort_request(key)


def ring_of(groups, net, *, timeout_s=2.0, codec="fp32", versions=None):
    versions = versions or {}
    for g in groups:
        net.nodes[g] = RingReducer(
            g,
            groups,
            net.transport(g),
            timeout_s=timeout_s,
            retries=2,
            codec=codec,
            version=lambda g=g: versions.get(g, 5),
        )
    return net.nodes


def run_all(nodes, sums, version=5):
    """reduce() on every node at once; each node's result or exception."""
    out: dict[str, object] = {}

    def run(g):
        try:
            out[g] = nodes[g].reduce(sums[g], version)
        except (ReduceFailed, SystemExit) as exc:
            out[g] = exc

    threads = [threading.Thread(target=run, args=(g,)) for g in sums]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def sums_for(groups, numel=1001, seed=0):
    rng = np.random.default_rng(seed)
    return {
        g: RoundSum(rng.standard_normal(numel).astype(np.float32), i + 1, frozenset({f"{g}.c"}), 10.0 * (i + 1))
        for i, g in enumerate(groups)
    }


def weighted_mean(sums, groups):
    """The reference: Σ w·δ / Σ w in float64."""
    w = np.array([sums[g].weight for g in groups])
    stack = np.stack([sums[g].delta.astype(np.float64) for g in groups])
    return (w[:, None] * stack).sum(0) / w.sum()


def test_chunk_bounds_cover_the_vector_evenly():
    """Chunks are contiguous, cover everything once, and differ in size by at most one element."""
    bounds = chunk_bounds(10, 3)
    assert bounds == [(0, 3), (3, 6), (6, 10)]
    assert chunk_bounds(2, 3) == [(0, 0), (0, 1), (1, 2)]


def test_encoded_chunk_round_trips_and_refuses_another_size():
    """int16 chunks decode to within a quantisation step; a chunk of another length is refused."""
    x = np.linspace(-1, 1, 777, dtype=np.float32)
    data = encode_chunk(x, "int16")
    assert len(data) < x.nbytes * 0.6
    np.testing.assert_allclose(decode_chunk(data, 777), x, atol=2 / 65535 + 1e-7)
    with pytest.raises(CodecError, match="more than the allowed 500"):
        decode_chunk(data, 500)
    with pytest.raises(CodecError, match="holds 777 values, expected 1000"):
        decode_chunk(data, 1000)


@pytest.mark.parametrize(
    ("groups", "codec"), [(("a", "b"), "fp32"), (("a", "b", "c"), "int16"), (("a", "b", "c", "d"), "int8")]
)
def test_every_ps_gets_the_same_bits_of_the_weighted_mean(groups, codec):
    """All members end with bit-identical combined deltas, equal to Σ w·δ / Σ w within the codec's error."""
    # Prepare
    net = FakeNet()
    nodes = ring_of(list(groups), net, codec=codec)
    sums = sums_for(groups)
    # Execute
    out = run_all(nodes, sums)
    # Assert
    first = out[groups[0]]
    assert isinstance(first, RoundSum)
    for g in groups:
        assert np.array_equal(out[g].delta, first.delta)
        assert out[g].weight == pytest.approx(sum(s.weight for s in sums.values()))
        assert out[g].count == sum(s.count for s in sums.values())
        assert nodes[g].completed == 1
    tol = {"fp32": 1e-6, "int16": 3e-4, "int8": 0.08}[codec]
    np.testing.assert_allclose(first.delta, weighted_mean(sums, groups), atol=tol)


def test_an_empty_round_contributes_nothing():
    """A PS that closed an empty round (weight 0) does not dilute the others' mean."""
    net = FakeNet()
    nodes = ring_of(["a", "b"], net)
    sums = sums_for(["a", "b"])
    sums["b"] = RoundSum(np.zeros(1001, np.float32), 0, frozenset(), 0.0)
    out = run_all(nodes, sums)
    np.testing.assert_allclose(out["a"].delta, sums["a"].delta, atol=1e-6)
    assert np.array_equal(out["a"].delta, out["b"].delta)


def test_a_ps_dying_mid_ring_is_excluded_and_the_others_agree_without_it():
    """c dies after its first chunk: a and b retry without it and apply the same mean of their own two rounds."""
    # Prepare
    net = FakeNet()
    nodes = ring_of(["a", "b", "c"], net, timeout_s=1.0)
    net.die_after["c"] = 1
    sums = sums_for(["a", "b", "c"])
    # Execute
    out = run_all(nodes, sums)
    # Assert
    assert isinstance(out["c"], SystemExit)
    assert np.array_equal(out["a"].delta, out["b"].delta)
    np.testing.assert_allclose(out["a"].delta, weighted_mean(sums, ["a", "b"]), atol=1e-6)
    assert nodes["a"].members == nodes["b"].members == ("a", "b")
    assert any(m.sender == "c" for m in net.sent)  # c really was mid-ring


def test_a_stalled_partner_is_timed_out_and_excluded():
    """b never calls reduce and never answers: a and c time out, exclude it and finish without it."""
    net = FakeNet()
    nodes = ring_of(["a", "b", "c"], net, timeout_s=0.5)
    net.stalled.add("b")
    sums = sums_for(["a", "b", "c"])
    t0 = time.monotonic()
    out = run_all(nodes, {g: sums[g] for g in ("a", "c")})
    assert time.monotonic() - t0 < 20
    assert np.array_equal(out["a"].delta, out["c"].delta)
    np.testing.assert_allclose(out["a"].delta, weighted_mean(sums, ["a", "c"]), atol=1e-6)
    assert nodes["a"].members == ("a", "c")


def test_a_ps_that_closes_its_round_late_joins_the_others_retry():
    """c reduces only after a and b timed out and retried: it follows their attempt and all three agree."""
    net = FakeNet()
    nodes = ring_of(["a", "b", "c"], net, timeout_s=0.6)
    sums = sums_for(["a", "b", "c"])
    out: dict[str, object] = {}

    def late():
        time.sleep(1.0)  # past a's and b's first timeout: they aborted attempt 0 and retry (c still answers)
        out["c"] = nodes["c"].reduce(sums["c"], 5)

    t = threading.Thread(target=late)
    t.start()
    out.update(run_all(nodes, {g: sums[g] for g in ("a", "b")}))
    t.join(30)
    assert all(isinstance(out[g], RoundSum) for g in "abc"), out
    assert np.array_equal(out["a"].delta, out["c"].delta) and np.array_equal(out["a"].delta, out["b"].delta)
    np.testing.assert_allclose(out["a"].delta, weighted_mean(sums, ["a", "b", "c"]), atol=1e-6)
    committed = [k for k, st in nodes["c"]._state.items() if st == COMMITTED]
    assert [k.attempt for k in committed] and min(k.attempt for k in committed) >= 1  # a retry, not attempt 0
    assert committed[0].members == ("a", "b", "c")


def test_a_late_message_from_an_excluded_ps_tells_it_to_resync():
    """After a and b went on without c, c's next chunk is refused and c marks itself for a resync."""
    net = FakeNet()
    versions = {"a": 5, "b": 5, "c": 5}
    nodes = ring_of(["a", "b", "c"], net, timeout_s=0.5, versions=versions)
    net.stalled.add("c")
    sums = sums_for(["a", "b", "c"])
    run_all(nodes, {g: sums[g] for g in ("a", "b")})
    net.stalled.clear()
    versions["a"] = versions["b"] = 6  # they applied version 5's ring
    out = run_all(nodes, {"c": sums["c"]})
    assert isinstance(out["c"], ReduceFailed) and out["c"].reason == "ring_behind"
    assert nodes["c"].needs_sync and not nodes["c"].may_close(5)


def test_a_ring_committed_somewhere_is_committed_everywhere_on_recovery():
    """If one member committed before the others timed out, their recovery commits the same result."""
    net = FakeNet()
    nodes = ring_of(["a", "b"], net, timeout_s=0.5)
    sums = sums_for(["a", "b"])
    # b will never receive a's DONE: drop it on the way, so only a commits in the normal path.
    real = FakeTransport.send

    def lossy(self, peer, msg, timeout):
        if msg.phase == "done" and self.me == "a":
            return None
        return real(self, peer, msg, timeout)

    FakeTransport.send = lossy
    try:
        out = run_all(nodes, sums)
    finally:
        FakeTransport.send = real
    assert isinstance(out["a"], RoundSum) or isinstance(out["b"], RoundSum)
    # a waited for b's DONE (sent) and committed; b timed out on a's DONE, asked a, heard COMMITTED.
    assert isinstance(out["a"], RoundSum) and isinstance(out["b"], RoundSum)
    assert np.array_equal(out["a"].delta, out["b"].delta)
    assert nodes["b"]._state[next(iter(k for k in nodes["b"]._state))] == COMMITTED


def test_a_rejoining_ps_is_added_by_the_next_committed_ring():
    """c asks to join; the next ring of a and b commits with c added to every member's view."""
    net = FakeNet()
    nodes = ring_of(["a", "b", "c"], net)
    for g in ("a", "b"):
        nodes[g].members = ("a", "b")
    nodes["c"].rejoined(("a", "b"))
    assert nodes["c"].joining and not nodes["c"].may_close(5)
    nodes["a"].join_request("c")
    run_all(nodes, {g: s for g, s in sums_for(["a", "b"]).items()})
    assert nodes["a"].members == nodes["b"].members == ("a", "b", "c")
    nodes["c"].rejoined(nodes["a"].members)
    assert not nodes["c"].joining and nodes["c"].may_close(6)


def test_messages_from_outside_the_ring_are_refused():
    """A chunk naming a ring this PS is not in, or from a sender outside it, is refused."""
    net = FakeNet()
    nodes = ring_of(["a", "b"], net)
    from ps_server.aggregation.ring import RingKey

    with pytest.raises(RingRefused, match="not a member"):
        nodes["a"].deliver(RingMessage(RingKey(5, ("a", "b")), "z", "scatter"))
    with pytest.raises(RingRefused, match="past the ring"):
        nodes["a"].deliver(RingMessage(RingKey(4, ("a", "b")), "b", "scatter"))
    with pytest.raises(RingRefused, match="not a PS group"):
        nodes["a"].join_request("z")
