"""Contribution accounting (issue 15) against a ledger computed by hand in this file.

A real `Aggregator` takes in-memory pushes; the expected tokens, update mass (weight × clipped norm, with
the staleness discount in the weight), shares and compute-seconds are written out as numbers below from
the rules in `docs/status.md`, not recomputed with the PS's helpers.
"""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig, TrainingConfig
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.contributions import Contributions
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush

N = 64


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _Push(ReceivedPush):
    """An in-memory push of a delta with L2 norm `norm`, `tokens` declared and a reported throughput."""

    def __init__(self, client: str, norm: float, *, tokens: int, base: int, tokens_per_s: float) -> None:
        values = np.zeros(N, np.float32)
        values[ord(client[0]) % N] = norm  # one non-zero element: the norm is exact in float32
        self.client_id, self._values, self.numel, self.codec_name = client, values, N, "fp32"
        self.norm = float(norm)
        self.header = PushHeader(base_version=base, upload_id=f"{client}/{base}", codec_header=b"", payload_bytes=0,
                                 num_tokens=tokens, local_steps=1, report={"tokens_per_s": tokens_per_s})

    def iter_values(self, max_numel):
        yield 0, self._values

    def close(self):
        pass


def _aggregator(clock: _Clock, window: int) -> Aggregator:
    agg = AggregationConfig(mode="async", buffer_size=2, buffer_timeout_s=1e9, weighting="tokens",
                            staleness_exponent=1.0, clip_norm=2.0, max_staleness=8)
    # lr 1: the guard's AdamW ceiling (lr·H·√n) and 3 × median stay above every norm here, so only clip_norm clips
    fed = FederationConfig(aggregation=agg, training=TrainingConfig(lr=1.0))
    a = Aggregator(fed, GlobalModel(), contributions=Contributions(window, clock))
    a.restore(1, np.zeros(N, np.float32), (TensorEntry("w", (N,), "float32"),), {})
    return a


def _run_ledger(window: int = 1) -> tuple[Aggregator, list[float]]:
    """Two applied rounds of two deltas each, then one delta left in the open round."""
    clock = _Clock()
    a = _aggregator(clock, window)
    for client in ("a", "b", "c"):
        a.contributions.seen(client)  # all joined at t = 0
    weights = []

    def push(client, norm, tokens, base, tps, at):
        clock.t = at
        weights.append(a.submit(_Push(client, norm, tokens=tokens, base=base, tokens_per_s=tps)).weight)

    push("a", 1.0, 100, 1, 20.0, 10.0)  # s=0, w=100, ‖δ‖=1           -> mass 100; compute min(100/20, 10) = 5
    push("b", 5.0, 300, 1, 10.0, 10.0)  # s=0, w=300, ‖δ‖=5 clipped 2 -> mass 600; compute min(30, 10) = 10
    assert a.model.version == 2
    push("c", 1.5, 200, 1, 100.0, 20.0)  # s=1, w=200/2=100, ‖δ‖=1.5  -> mass 150; compute min(2, 20) = 2
    push("a", 3.0, 100, 2, 5.0, 30.0)  # s=0, w=100, ‖δ‖=3 clipped 2  -> mass 200; compute min(20, 30-10) = 20
    assert a.model.version == 3
    push("b", 1.0, 100, 3, 10.0, 40.0)  # buffered, never applied: credited nothing
    assert a.model.version == 3
    return a, weights


def test_weights_carry_the_staleness_discount():
    # Execute
    _, weights = _run_ledger()

    # Assert: (1 + s)^-1 with s = 1 for c's delta
    assert weights == [100.0, 300.0, 100.0, 100.0, 100.0]


def test_totals_match_the_hand_computed_ledger():
    # Execute
    a, _ = _run_ledger()
    report = a.contributions.report()

    # Assert
    assert {c: (r["deltas"], r["tokens"]) for c, r in report.items()} == {"a": (2, 200), "b": (1, 300), "c": (1, 200)}
    assert report["a"]["mass"] == pytest.approx(300.0)
    assert report["b"]["mass"] == pytest.approx(600.0)
    assert report["c"]["mass"] == pytest.approx(150.0)
    assert report["a"]["compute_s"] == pytest.approx(25.0)
    assert report["b"]["compute_s"] == pytest.approx(10.0)
    assert report["c"]["compute_s"] == pytest.approx(2.0)


def test_shares_over_the_run_and_over_a_one_version_window():
    # Execute
    a, _ = _run_ledger(window=1)
    report = a.contributions.report()

    # Assert: run = all of 1050; window = the last applied version (a 200, c 150)
    assert report["a"]["share_run"] == pytest.approx(300 / 1050)
    assert report["b"]["share_run"] == pytest.approx(600 / 1050)
    assert report["c"]["share_run"] == pytest.approx(150 / 1050)
    assert report["a"]["share_window"] == pytest.approx(200 / 350)
    assert report["b"]["share_window"] == 0.0
    assert report["c"]["share_window"] == pytest.approx(150 / 350)


def test_a_window_longer_than_the_run_equals_the_run():
    a, _ = _run_ledger(window=5)
    report = a.contributions.report()

    for r in report.values():
        assert r["share_window"] == pytest.approx(r["share_run"])


def test_the_ledger_survives_a_checkpoint():
    # Prepare
    a, _ = _run_ledger(window=1)
    state = a.state_dict()

    # Execute
    b = _aggregator(_Clock(), window=1)
    b.restore(3, np.zeros(N, np.float32), (TensorEntry("w", (N,), "float32"),), state)

    # Assert
    assert b.contributions.report() == a.contributions.report()


def test_a_dropped_round_credits_nothing():
    # Prepare
    c = Contributions(window=3, clock=_Clock())
    c.folded("x", tokens=10, weight=10.0, norm=1.0, clip_norm=0.0, tokens_per_s=0.0)

    # Execute
    c.dropped()
    c.applied()  # an empty round (a multi-PS ring closes those)

    # Assert
    assert c.report() == {}


def test_no_reported_throughput_means_no_compute_seconds_and_a_zero_delta_no_mass():
    c = Contributions(window=3, clock=_Clock())
    c.folded("x", tokens=10, weight=10.0, norm=0.0, clip_norm=0.0, tokens_per_s=0.0)
    c.applied()

    assert c.report()["x"] == {"deltas": 1, "tokens": 10, "mass": 0.0, "compute_s": 0.0, "share_window": 0.0,
                               "share_run": 0.0}


def test_the_norm_bound_caps_the_mass_it_credits():
    """Three honest norms of 1 set the default bound to 2 × median = 2: a norm-30 delta is credited as 2."""
    clock = _Clock()
    agg = AggregationConfig(mode="async", buffer_size=1, weighting="tokens", staleness_exponent=1.0)
    fed = FederationConfig(aggregation=agg, training=TrainingConfig(lr=1.0))  # AdamW ceiling far above 30
    a = Aggregator(fed, GlobalModel(), contributions=Contributions(8, clock))
    a.restore(1, np.zeros(N, np.float32), (TensorEntry("w", (N,), "float32"),), {})
    for base, (client, norm) in enumerate((("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 30.0)), start=1):
        clock.t += 1.0
        a.submit(_Push(client, norm, tokens=100, base=base, tokens_per_s=100.0))
    assert a.model.version == 5

    report = a.contributions.report()

    assert {c: r["mass"] for c, r in report.items()} == pytest.approx({"a": 100.0, "b": 100.0, "c": 100.0,
                                                                       "d": 200.0})
    assert report["d"]["share_run"] == pytest.approx(200 / 500)


def test_goodput_counts_a_retransmitted_upload_once_and_a_dropped_rounds_tokens_as_not_applied():
    # Prepare
    c = Contributions()
    # Execute: 100 tokens applied; 300 received twice (a retransmit) and folded into a round that is dropped
    c.received("a", "u1", 100)
    c.folded("a", tokens=100, weight=1.0, norm=1.0, clip_norm=0.0, tokens_per_s=0.0, reported_tokens=100)
    c.applied()
    c.received("b", "u2", 300)
    c.received("b", "u2", 300)
    c.folded("b", tokens=300, weight=1.0, norm=1.0, clip_norm=0.0, tokens_per_s=0.0, reported_tokens=300)
    c.dropped()
    # Assert
    assert c.goodput() == {"tokens_received": 400, "tokens_applied": 100, "goodput": 0.25}


def test_goodput_survives_a_checkpoint():
    c = Contributions()
    c.received("a", "u1", 100)
    c.folded("a", tokens=100, weight=1.0, norm=1.0, clip_norm=0.0, tokens_per_s=0.0, reported_tokens=100)
    c.applied()
    c.received("b", "u2", 300)
    restored = Contributions()
    restored.load_state_dict(c.state_dict())
    assert restored.goodput() == c.goodput() == {"tokens_received": 400, "tokens_applied": 100, "goodput": 0.25}
