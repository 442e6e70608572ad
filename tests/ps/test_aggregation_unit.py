"""Pure aggregation logic: outer optimizers, weighting, round closing, robust combination."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofed.config import AggregationConfig, FederationConfig, TrainingConfig
from ps_server.aggregation.accumulator import DeltaAccumulator
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.outer import build_outer_optimizer
from ps_server.aggregation.robust import RobustRound, RobustWindow, trimmed_mean
from ps_server.aggregation.rounds import StaleDelta, admit, should_close
from ps_server.aggregation.sites import FixedSites
from ps_server.aggregation.weighting import clip_scale, staleness_factor
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush


@pytest.mark.parametrize(
    ("name", "torch_opt"),
    [
        ("fedavg", lambda p: torch.optim.SGD([p], lr=0.7)),
        ("nesterov", lambda p: torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)),
        ("adam", lambda p: torch.optim.Adam([p], lr=0.7, betas=(0.9, 0.99), eps=1e-3)),
    ],
)
def test_outer_optimizer_matches_torch_on_pseudo_gradient(name, torch_opt):
    rng = np.random.default_rng(0)
    theta = rng.standard_normal(1000).astype(np.float32)
    cfg = AggregationConfig(outer_optimizer=name, global_lr=0.7, momentum=0.9, beta1=0.9, beta2=0.99, adam_eps=1e-3)
    opt = build_outer_optimizer(cfg, theta.size)
    param = torch.nn.Parameter(torch.from_numpy(theta.copy()))
    ref = torch_opt(param)
    for _ in range(4):
        delta = rng.standard_normal(1000).astype(np.float32) * 0.1
        update = delta.copy()
        opt.increment_(update)
        theta = theta + update
        param.grad = -torch.from_numpy(delta)
        ref.step()
        np.testing.assert_allclose(theta, param.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_fednova_rescales_by_effective_steps():
    acc = DeltaAccumulator(2)
    d1, d2 = np.array([4.0, 8.0], np.float32), np.array([1.0, 1.0], np.float32)
    for client, d, w, tau in (("a", d1, 1.0, 4), ("b", d2, 3.0, 1)):
        acc.add(0, d, w / tau)
        acc.commit(client, w, tau)
    # normalised directions d/τ, averaged with weights (1, 3), times τ_eff = (1·4 + 3·1) / 4
    expected = (1 * d1 / 4 + 3 * d2 / 1) / 4 * (7 / 4)
    np.testing.assert_allclose(acc.mean_(fednova=True), expected, rtol=1e-6)


def test_staleness_and_clip_weights():
    assert staleness_factor(0, 0.5) == 1.0
    assert staleness_factor(3, 0.5) == pytest.approx(0.5)
    assert clip_scale(10.0, 2.0) == pytest.approx(0.2)
    assert clip_scale(1.0, 2.0) == 1.0 and clip_scale(10.0, 0.0) == 1.0


def test_admission_refuses_beyond_max_staleness_and_future_versions():
    cfg = AggregationConfig(max_staleness=2)
    assert admit(cfg, 5, 7).staleness == 2
    with pytest.raises(StaleDelta, match="3 versions behind"):
        admit(cfg, 4, 7)
    with pytest.raises(StaleDelta, match="ahead"):
        admit(cfg, 8, 7)


@pytest.mark.parametrize(
    ("mode", "buffered", "in_round", "active", "age", "expected"),
    [
        ("async", 1, 1, 4, 0.0, True),  # K = 1 default
        ("sync", 2, 2, 4, 0.0, False),  # waits for all 4 ...
        ("sync", 4, 4, 4, 0.0, True),
        ("sync", 2, 2, 4, 999.0, True),  # ... or the straggler timeout
        ("sync", 0, 0, 4, 999.0, False),  # nothing to apply
    ],
)
def test_should_close(mode, buffered, in_round, active, age, expected):
    cfg = AggregationConfig(mode=mode, straggler_timeout_s=120)
    got = should_close(cfg, buffered=buffered, clients_in_round=in_round, active_clients=active,
                       first_at=0.0 if buffered else None, now=age)
    assert got is expected


@pytest.mark.parametrize("method", ["median", "trimmed_mean"])
def test_robust_accumulator_matches_numpy_order_statistics(method, tmp_path):
    rng = np.random.default_rng(1)
    deltas = [rng.standard_normal(3000).astype(np.float32) for _ in range(5)]
    window = RobustWindow(3000, method, trim_fraction=0.2, capacity=16, spool_dir=str(tmp_path))
    acc = RobustRound(window, AggregationConfig(mode="sync"), version=1)
    for i, d in enumerate(deltas):
        for start in range(0, 3000, 700):  # pieces, as a streaming decoder yields them
            acc.add(start, d[start : start + 700], 1.0)
        acc.commit(f"c{i}", 1.0, 1, base_version=1)
    stack = np.stack(deltas)
    expected = np.median(stack, axis=0) if method == "median" else np.sort(stack, axis=0)[1:4].mean(axis=0)
    np.testing.assert_allclose(acc.combine(), expected, rtol=1e-6)
    assert trimmed_mean(stack, 0.0).shape == (3000,)


class _Push(ReceivedPush):
    """A received push whose values come from memory (the aggregator only iterates them)."""

    def __init__(self, client, values, tokens=1, base=1, upload="u"):
        self.client_id, self._values, self.numel, self.codec_name = client, values, values.size, "fp32"
        self.norm = float(np.linalg.norm(values))
        self.header = PushHeader(base_version=base, upload_id=upload, codec_header=b"", payload_bytes=0,
                                 num_tokens=tokens)

    def iter_values(self, max_numel):
        yield 0, self._values

    def close(self):
        pass


def _aggregator(**agg) -> tuple[Aggregator, np.ndarray]:
    model = GlobalModel()
    theta = np.zeros(100, np.float32)
    # lr 0.01 × 50 local steps: the norm bound's AdamW ceiling (0.55·√numel) sits above these tests' deltas
    fed = FederationConfig(aggregation=AggregationConfig(**agg), training=TrainingConfig(lr=0.01, local_steps=50))
    a = Aggregator(fed, model, sites=FixedSites(5))
    a.restore(1, theta.copy(), (TensorEntry("w", (100,), "float32"),), {})
    return a, theta


@pytest.mark.parametrize("robust", ["median", "trimmed_mean"])
def test_poisoned_client_cannot_move_robust_aggregate(robust):
    agg, theta = _aggregator(mode="sync", weighting="tokens", robust=robust, trim_fraction=0.2, global_lr=1.0)
    honest = [np.full(100, 0.1 + 0.01 * i, np.float32) for i in range(4)]
    for i, d in enumerate(honest):
        agg.submit(_Push(f"h{i}", d, tokens=100, upload=f"h{i}"))
    agg.submit(_Push("evil", np.full(100, 1e6, np.float32), tokens=10**9, upload="evil"))
    got = agg.model.current().flat
    assert agg.model.version == 2
    assert np.abs(got - np.mean(honest, axis=0)).max() < 0.05


def test_clip_norm_bounds_a_poisoned_delta():
    agg, _ = _aggregator(mode="async", buffer_size=1, clip_norm=1.0, weighting="uniform", global_lr=1.0)
    agg.submit(_Push("evil", np.full(100, 1e6, np.float32)))
    assert np.linalg.norm(agg.model.current().flat) == pytest.approx(1.0, rel=1e-5)


def test_without_defences_a_poisoned_delta_dominates():
    agg, _ = _aggregator(mode="sync", weighting="tokens", norm_bound_multiple=0)
    for i in range(4):
        agg.submit(_Push(f"h{i}", np.full(100, 0.1, np.float32), tokens=100, upload=f"h{i}"))
    agg.submit(_Push("evil", np.full(100, 1e6, np.float32), tokens=10**9, upload="evil"))
    assert agg.model.current().flat.min() > 1e5


def test_stale_delta_is_shrunk_even_when_applied_alone():
    agg, _ = _aggregator(mode="async", buffer_size=1, weighting="tokens", staleness_exponent=1.0, global_lr=1.0)
    agg.model.publish(4, np.zeros(100, np.float32), agg.model.current().manifest)  # global is now v4
    agg.submit(_Push("late", np.full(100, 0.02, np.float32), tokens=1000, base=1))  # 3 versions behind
    np.testing.assert_allclose(agg.model.current().flat, 0.005)  # 0.02 × (1 + 3) ** -1, not renormalised to 0.02
