"""aggregation.mode 'auto' (issue 14, item 2): the PS switches sync <-> async from the measured spread of client
round times, only between rounds, losing no delta and counting none twice. No sockets: a plain aggregator on a
fake clock; every published model is checked against one computed by hand from the deltas pushed."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from geofed.config import FederationConfig
from geofed.tuning import initial_mode
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.sites import FixedSites
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush
from ps_server.metrics import PSMetrics
from ps_server.status_page.view import federation_settings

NUMEL = 64
MANIFEST = (TensorEntry("w", (NUMEL,), "float32"),)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _Push(ReceivedPush):
    """A received push whose values come from memory (the aggregator only iterates them)."""

    def __init__(self, client: str, values: np.ndarray, base: int) -> None:
        self.client_id, self._values, self.numel, self.codec_name = client, values, values.size, "fp32"
        self.norm = float(np.linalg.norm(values))
        self.header = PushHeader(base_version=base, upload_id=f"{client}-{base}", codec_header=b"", payload_bytes=0,
                                 num_tokens=100)

    def iter_values(self, max_numel):
        yield 0, self._values

    def close(self):
        pass


def _fed(mode: str, global_lr: float | None = 1.0) -> FederationConfig:
    # FedAvg at η = 1 with equal weights: a round's update is the plain mean of its deltas times their staleness
    # factors (1 + s) ** -1, which the references below spell out. Timeouts far away: only quorum / K close.
    return FederationConfig.model_validate({
        "aggregation": {"mode": mode, "quorum": 1.0, "straggler_timeout_s": 1000, "late_policy": "accept",
                        "buffer_size": 1, "buffer_timeout_s": 1000, "staleness_exponent": 1.0,
                        "weighting": "uniform", "outer_optimizer": "fedavg", "global_lr": global_lr,
                        "norm_bound_multiple": 0, "max_staleness": 16},
        "autotune": {"async_above": 2.0, "sync_below": 1.5, "round_window": 1},
    })


def _aggregator(mode: str, clock: Clock, global_lr: float | None = 1.0) -> tuple[Aggregator, np.ndarray]:
    agg = Aggregator(_fed(mode, global_lr), GlobalModel(), sites=FixedSites(2), clock=clock)
    theta = np.random.default_rng(0).standard_normal(NUMEL).astype(np.float32)
    agg.restore(1, theta.copy(), MANIFEST, {})  # version 1 published at t = 0
    return agg, theta


class Run:
    """Pushes at given times; remembers every delta so the test can build the reference model itself."""

    def __init__(self, agg: Aggregator, clock: Clock) -> None:
        self.agg, self.clock, self.rng = agg, clock, np.random.default_rng(1)
        self.deltas: dict[tuple[str, int], np.ndarray] = {}

    def push(self, t: float, client: str, base: int):
        self.clock.t = t
        delta = (self.rng.standard_normal(NUMEL) * 0.01).astype(np.float32)
        self.deltas[client, base] = delta
        return self.agg.submit(_Push(client, delta, base))

    def d(self, client: str, base: int) -> np.ndarray:
        return self.deltas[client, base].astype(np.float64)


def _autotune_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "knob=aggregation_mode" in r.getMessage()]


def test_auto_starts_sync_switches_at_round_boundaries_and_loses_no_delta(caplog):
    clock = Clock()
    agg, theta = _aggregator("auto", clock)
    run = Run(agg, clock)
    ref = theta.astype(np.float64)
    assert agg.mode == "sync" and initial_mode("auto") == "sync"
    with caplog.at_level(logging.INFO, logger="geofed.ps"):
        # Sync round 1: F takes 2 s, S 8 s. F's delta waits in the open round; nothing switches while it is open.
        assert run.push(2, "F", 1).status == "ACCEPTED"
        assert (agg.mode, agg.model.version, agg.buffered) == ("sync", 1, 1)
        assert agg.tick() is None  # the timer does not close it early either
        out = run.push(8, "S", 1)
        assert (out.status, out.version) == ("APPLIED", 2)
        ref += (run.d("F", 1) + run.d("S", 1)) / 2  # both deltas, once each, at full weight
        np.testing.assert_allclose(agg.model.current().flat, ref, rtol=0, atol=1e-6)
        # Spread 8 / 2 = 4 > async_above 2: async from the next delta on (the round has just closed).
        assert agg.mode == "async" and agg.buffered == 0
        lines = _autotune_lines(caplog)
        assert len(lines) == 1 and "value=async" in lines[0] and "applied=true" in lines[0]
        assert "= 4 > async_above 2" in lines[0]

        # Async, K = 1: each delta is an outer step of its own, scaled by (1 + staleness) ** -1.
        for t, base in ((12, 2), (14, 3), (16, 4)):  # F: round times 4 s, then 2 s
            out = run.push(t, "F", base)
            assert (out.status, out.version, out.staleness) == ("APPLIED", base + 1, 0)
            ref += run.d("F", base)
        # S's delta trained on version 2 was in flight across the switch: it arrives 3 versions behind and takes
        # async's staleness rule: 1 / (1 + 3), not sync's late_policy 'accept'.
        out = run.push(16, "S", 2)
        assert (out.status, out.version, out.staleness, out.weight) == ("APPLIED", 6, 3, 0.25)
        ref += run.d("S", 2) / 4
        np.testing.assert_allclose(agg.model.current().flat, ref, rtol=0, atol=1e-6)
        assert agg.mode == "async"
        # S speeds up (2 s): spread 1 < sync_below 1.5, so sync after this outer step (buffer empty again).
        out = run.push(18, "S", 6)
        assert (out.status, out.version) == ("APPLIED", 7)
        ref += run.d("S", 6)
        assert agg.mode == "sync" and agg.buffered == 0
        lines = _autotune_lines(caplog)
        assert len(lines) == 2 and "value=sync" in lines[1] and "applied=true" in lines[1]

        # Sync again: F's delta trained on version 6 (in flight) arrives 1 behind and follows sync's late_policy
        # 'accept' (weight 1); it waits in the round until S's closes the quorum.
        out = run.push(19, "F", 6)
        assert (out.status, out.version, out.staleness, out.weight) == ("ACCEPTED", 7, 1, 1.0)
        assert agg.model.version == 7
        out = run.push(20, "S", 7)
        assert (out.status, out.version) == ("APPLIED", 8)
        ref += (run.d("F", 6) + run.d("S", 7)) / 2
        np.testing.assert_allclose(agg.model.current().flat, ref, rtol=0, atol=1e-6)
        # F 3 s, S 2 s: 1.5 is within the hysteresis band, sync stands.
        assert agg.mode == "sync" and len(_autotune_lines(caplog)) == 2
    # Every pushed delta went into exactly one version: the ledger counts them once each.
    assert {c: v.pushes for c, v in agg.ledger.items()} == {"F": 5, "S": 4}


def test_fedavgs_own_eta_follows_the_live_mode():
    """global_lr unset: a sync round steps by the mean of its deltas (η 1), an async delta by half of it (η 0.5)."""
    clock = Clock()
    agg, theta = _aggregator("auto", clock, global_lr=None)
    run = Run(agg, clock)
    ref = theta.astype(np.float64)
    run.push(2, "F", 1)
    run.push(8, "S", 1)  # closes the sync round; the spread 4 > 2 switches to async after it
    ref += (run.d("F", 1) + run.d("S", 1)) / 2
    np.testing.assert_allclose(agg.model.current().flat, ref, rtol=0, atol=1e-6)
    assert agg.mode == "async"
    out = run.push(12, "F", 2)
    assert (out.status, out.version, out.staleness) == ("APPLIED", 3, 0)
    ref += 0.5 * run.d("F", 2)
    np.testing.assert_allclose(agg.model.current().flat, ref, rtol=0, atol=1e-6)


def _to_async(agg: Aggregator, clock: Clock) -> None:
    run = Run(agg, clock)
    run.push(2, "F", 1)
    run.push(8, "S", 1)


def test_the_live_mode_is_exported_and_the_advice_kept():
    clock = Clock()
    agg, _ = _aggregator("auto", clock)
    metrics = PSMetrics()
    metrics.set_tuning(agg.round_times)
    sample = metrics.registry.get_sample_value
    assert (sample("geofed_aggregation_mode", {"mode": "sync"}), sample("geofed_aggregation_mode", {"mode": "async"})) \
        == (1.0, 0.0)
    _to_async(agg, clock)
    metrics.set_tuning(agg.round_times)
    assert (sample("geofed_aggregation_mode", {"mode": "sync"}), sample("geofed_aggregation_mode", {"mode": "async"})) \
        == (0.0, 1.0)
    assert sample("geofed_aggregation_mode_advice", {"mode": "async"}) == 1.0


def test_a_fixed_mode_only_advises(caplog):
    clock = Clock()
    agg, theta = _aggregator("sync", clock)
    with caplog.at_level(logging.INFO, logger="geofed.ps"):
        _to_async(agg, clock)
    assert agg.round_times.mode_advice == "async" and agg.mode == "sync"
    assert "applied=false" in _autotune_lines(caplog)[0]
    metrics = PSMetrics()
    metrics.set_tuning(agg.round_times)
    assert metrics.registry.get_sample_value("geofed_aggregation_mode", {"mode": "sync"}) == 1.0


@pytest.mark.parametrize("configured", ["auto", "sync"])
def test_the_live_mode_is_checkpointed_for_auto_only(configured):
    clock = Clock()
    agg, _ = _aggregator(configured, clock)
    _to_async(agg, clock)
    state = agg.state_dict()
    assert state["mode"] == ("async" if configured == "auto" else "sync")
    snap = agg.model.current()
    resumed = Aggregator(_fed(configured), GlobalModel(), sites=FixedSites(2), clock=clock)
    resumed.restore(snap.version, snap.flat.copy(), MANIFEST, {**state, "mode": "async"})
    assert resumed.mode == ("async" if configured == "auto" else "sync")  # a fixed mode ignores a saved one
    if configured == "auto":  # the strategy runs it too (its robust window and close rule read the live mode)
        assert resumed.strategy.cfg.mode == "async"


def test_auto_is_refused_where_a_switch_is_not_built():
    assert FederationConfig().aggregation.mode == "async"  # the default: sites of unequal speed are the rule
    with pytest.raises(ValueError, match="needs one PS"):
        FederationConfig.model_validate({"aggregation": {"mode": "auto"}, "ps_shards": 2})


def test_the_status_page_shows_auto_with_the_running_mode():
    clock = Clock()
    agg, _ = _aggregator("auto", clock)
    core = SimpleNamespace(fed=agg.fed, aggregator=agg, server=SimpleNamespace(contribution_window=20),
                           tokenizer=("", ""), model=SimpleNamespace(current=lambda: None))
    assert federation_settings(core)["mode"] == "auto (sync now)"  # type: ignore[arg-type]
    _to_async(agg, clock)
    assert federation_settings(core)["mode"] == "auto (async now)"  # type: ignore[arg-type]
