"""Issue 17's PS corrections: FedNova's weights, outer-optimizer changes and non-finite state across restarts,
base version 0. References are the papers' formulas computed here with numpy, not the PS's own code."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig, TrainingConfig
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.sites import FixedSites
from ps_server.errors import InvalidPush
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush

NUMEL = 64
MANIFEST = (TensorEntry("w", (NUMEL,), "float32"),)


class MemoryPush(ReceivedPush):
    """A validated push whose payload is an in-memory vector."""

    def __init__(self, client: str, values: np.ndarray, *, tokens: int, steps: int, base: int = 1) -> None:
        self.client_id, self._values, self.numel, self.codec_name = client, values, values.size, "fp32"
        self.norm = float(np.linalg.norm(values))
        self.header = PushHeader(base_version=base, upload_id=f"{client}-{base}", codec_header=b"",
                                 payload_bytes=0, num_tokens=tokens, local_steps=steps)

    def iter_values(self, max_numel):
        yield 0, self._values

    def close(self) -> None:
        pass


def aggregator(theta: np.ndarray, state: dict | None = None, **agg) -> Aggregator:
    fed = FederationConfig(aggregation=AggregationConfig(**agg), training=TrainingConfig(lr=0.01, local_steps=50))
    a = Aggregator(fed, GlobalModel(), sites=FixedSites(2))
    a.restore(1, theta.copy(), MANIFEST, state or {})
    return a


def test_fednova_matches_the_papers_update_with_unequal_local_steps():
    """x⁺ = x + τ_eff Σ p_i Δ_i/τ_i with p_i the data share (equal here), not the tokens that grow with τ_i."""
    rng = np.random.default_rng(1)
    theta = rng.standard_normal(NUMEL).astype(np.float32)
    steps = {"a": 40, "b": 10}
    # Equal progress per local step (b's 10 steps move a quarter as far as a's 40): the norm bound, which
    # measures a FedNova delta as the round applies it (‖δ‖·H/τ), scales neither.
    deltas = {c: rng.standard_normal(NUMEL).astype(np.float32) * 1e-3 * steps[c] / 40 for c in ("a", "b")}
    per_step_tokens = 16 * 128  # same batch on every client (§III-C2): tokens = τ · batch · block
    agg = aggregator(theta, mode="sync", fednova=True, global_lr=1.0, quorum=1.0)

    for c in ("a", "b"):
        agg.submit(MemoryPush(c, deltas[c], tokens=steps[c] * per_step_tokens, steps=steps[c]))
    got = agg.model.current()

    p = {"a": 0.5, "b": 0.5}
    tau_eff = sum(p[c] * steps[c] for c in p)
    expected = theta + tau_eff * sum(p[c] * deltas[c] / steps[c] for c in p)
    assert got.version == 2
    np.testing.assert_allclose(got.flat, expected, rtol=1e-5, atol=1e-7)
    plain_fedavg = theta + sum(steps[c] * deltas[c] for c in p) / sum(steps.values())
    assert not np.allclose(got.flat, plain_fedavg, rtol=1e-3, atol=1e-6)  # what token weighting used to give


def test_changing_the_outer_optimizer_across_a_restart_starts_its_state_fresh(caplog):
    theta = np.zeros(NUMEL, np.float32)
    nesterov = aggregator(theta, outer_optimizer="nesterov", global_lr=0.7, momentum=0.9)
    nesterov.submit(MemoryPush("a", np.full(NUMEL, 1e-3, np.float32), tokens=100, steps=1))
    saved = nesterov.state_dict()
    assert np.abs(saved["strategy"]["outer"]["buf"]).max() > 0

    with caplog.at_level(logging.WARNING, logger="geofed.ps"):
        adam = aggregator(nesterov.model.current().flat, saved, outer_optimizer="adam", global_lr=0.01)
    assert "outer optimizer changed from 'nesterov' to 'adam'" in caplog.text
    assert adam.strategy.outer.t == 0 and not adam.strategy.outer.m.any()

    again = aggregator(nesterov.model.current().flat, saved, outer_optimizer="nesterov", global_lr=0.7, momentum=0.9)
    np.testing.assert_array_equal(again.strategy.outer.buf, saved["strategy"]["outer"]["buf"])  # same one: kept


def test_a_non_finite_saved_momentum_is_not_restored(caplog):
    theta = np.zeros(NUMEL, np.float32)
    buf = np.zeros(NUMEL, np.float32)
    buf[3] = np.inf
    state = {"paradigm": "pretrain", "strategy": {"outer": {"name": "nesterov", "buf": buf}}}

    with caplog.at_level(logging.WARNING, logger="geofed.ps"):
        agg = aggregator(theta, state, outer_optimizer="nesterov", global_lr=0.7, momentum=0.9)
    assert "non-finite" in caplog.text
    assert np.isfinite(agg.strategy.outer.buf).all()
    agg.submit(MemoryPush("a", np.full(NUMEL, 1e-3, np.float32), tokens=100, steps=1))
    assert np.isfinite(agg.model.current().flat).all()


def test_checkpoints_without_a_saved_optimizer_name_still_restore():
    theta = np.zeros(NUMEL, np.float32)
    buf = np.full(NUMEL, 0.25, np.float32)
    agg = aggregator(theta, {"outer": {"buf": buf}}, outer_optimizer="nesterov", momentum=0.9)  # pre-seam layout
    np.testing.assert_array_equal(agg.strategy.outer.buf, buf)


def test_a_delta_on_base_version_zero_is_refused_with_the_reason():
    agg = aggregator(np.zeros(NUMEL, np.float32))
    header = PushHeader(base_version=0, upload_id="zero", codec_header=b"", payload_bytes=0, num_tokens=1)

    with pytest.raises(InvalidPush, match="base version 0 names no global model"):
        agg.precheck("a", header, master=False)
    assert agg.model.version == 1


def test_restoring_another_paradigms_checkpoint_is_refused():
    with pytest.raises(ValueError, match="paradigm 'bitfit'"):
        aggregator(np.zeros(NUMEL, np.float32), {"paradigm": "bitfit"})
