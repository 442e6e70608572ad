"""The Aggregator tells its observers what happened, as events, in the order it happened; the PS's metrics
count them under the names they always had."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig, TrainingConfig
from geofed_testing.events import EventLog
from geofed_testing.payloads import MemoryPush
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.events import (
    DeltaBounded,
    DeltaFolded,
    RoundClosed,
    RoundDropped,
    VersionApplied,
    VersionComplete,
)
from ps_server.aggregation.sites import FixedSites
from ps_server.errors import InvalidPush
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.metrics import PSMetrics

N = 64
# AdamW ceiling 1.1 × lr × H × √N = 0.44; a federation's first delta is bounded to 2 × 0.44 / √H ≈ 0.124
FIRST_BOUND = 2 * 1.1 * 1e-3 * 50 * np.sqrt(N) / np.sqrt(50)


def _aggregator(*observers, mode: str = "sync") -> Aggregator:
    fed = FederationConfig(aggregation=AggregationConfig(mode=mode, quorum=1.0, buffer_size=1, global_lr=1.0),
                           training=TrainingConfig(lr=1e-3, batch_size=16, local_steps=50))
    a = Aggregator(fed, GlobalModel(), sites=FixedSites(1), observers=observers)
    a.restore(1, np.zeros(N, np.float32), (TensorEntry("w", (N,), "float32"),), {})
    return a


def test_a_bounded_delta_that_closes_its_round_is_told_step_by_step():
    # Prepare
    log = EventLog()
    a = _aggregator(log)
    push = MemoryPush("a", np.full(N, 1 / np.sqrt(N), np.float32), tokens=100)  # length 1, beyond its bound

    # Execute
    outcome = a.submit(push)

    # Assert
    assert outcome.status == "APPLIED"
    assert [type(e) for e in log.events] == [DeltaBounded, DeltaFolded, RoundClosed, VersionComplete, VersionApplied]
    bounded, folded, closed, complete, applied = log.events
    assert (bounded.client_id, bounded.site, bounded.rule) == ("a", "a", "norm_bound")
    assert bounded.norm == pytest.approx(1.0) and bounded.bounded_to == pytest.approx(FIRST_BOUND)
    assert (folded.client_id, folded.staleness, folded.tokens) == ("a", 0, 100)
    assert folded.norm == pytest.approx(FIRST_BOUND)
    assert (closed.version, closed.deltas, closed.clients) == (2, 1, 1)
    assert complete.snapshot is applied.snapshot and applied.snapshot.version == 2


def test_the_contributions_observe_first_and_credit_the_applied_delta():
    # Prepare
    log = EventLog()
    a = _aggregator(log)

    # Execute
    a.submit(MemoryPush("a", np.full(N, 0.001, np.float32), tokens=100))

    # Assert
    assert a.observers == [a.contributions, log]
    assert a.contributions.report()["a"]["tokens"] == 100


def test_the_ps_metrics_count_the_aggregators_events_by_their_names():
    # Prepare
    metrics = PSMetrics()
    a = _aggregator(metrics, mode="async")
    a.submit(MemoryPush("a", np.full(N, 1 / np.sqrt(N), np.float32)))
    a.strategy.outer.lr = float("inf")  # fault injection: the next round's step overflows

    # Execute
    with pytest.raises(InvalidPush, match="non-finite"):
        a.submit(MemoryPush("b", np.full(N, 0.001, np.float32), base=2))

    # Assert
    sample = metrics.registry.get_sample_value
    assert sample("geofed_bounded_deltas_total", {"rule": "norm_bound"}) == 1
    assert sample("geofed_staleness_count") == 2
    assert sample("geofed_rejected_pushes_total", {"reason": "nonfinite_round"}) == 1


def test_a_dropped_round_is_told_with_its_reason():
    # Prepare
    log = EventLog()
    a = _aggregator(log, mode="async")
    a.strategy.outer.lr = float("inf")

    # Execute
    with pytest.raises(InvalidPush):
        a.submit(MemoryPush("a", np.full(N, 0.001, np.float32)))

    # Assert
    (dropped,) = log.of(RoundDropped)
    assert (dropped.reason, dropped.deltas) == ("nonfinite_round", 1) and "non-finite" in dropped.why
    assert not log.of(RoundClosed) and not log.of(VersionApplied)
