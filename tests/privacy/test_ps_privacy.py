"""Site-level DP at the PS, in process: a real `Aggregator` fed in-memory pushes; expected clip, noise scale, ε and
budget stop recomputed here from the raw parameters (numpy and dp_accounting directly, not the PS's helpers)."""

from __future__ import annotations

import logging
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from geofed.config import FederationConfig
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.sites import FixedSites
from ps_server.errors import NotPermitted
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush

N = 20_000
LAYOUT = (TensorEntry("w", (N,), "float32"),)


class _Push(ReceivedPush):
    """A received push whose values come from memory (the aggregator only iterates them)."""

    def __init__(self, client: str, values: np.ndarray, *, base: int = 1) -> None:
        self.client_id, self._values, self.numel, self.codec_name = client, values, values.size, "fp32"
        self.norm = float(np.linalg.norm(values.astype(np.float64)))
        self.header = PushHeader(
            base_version=base,
            upload_id=f"{client}/{base}",
            codec_header=b"",
            payload_bytes=0,
            num_tokens=1,
            local_steps=1,
        )

    def iter_values(self, max_numel: int):
        for off in range(0, self.numel, 4096):
            yield off, self._values[off : off + 4096]

    def close(self) -> None:
        pass


def _fed(sites: int = 3, **privacy) -> FederationConfig:
    return FederationConfig.model_validate(
        {
            "aggregation": {
                "mode": "sync",
                "quorum": 1.0,
                "weighting": "uniform",
                "global_lr": 1.0,
                "norm_bound_multiple": 0.0,
            },
            "privacy": {"enabled": True, **privacy},
        }
    )


def _aggregator(fed: FederationConfig, sites: int = 3) -> Aggregator:
    a = Aggregator(fed, GlobalModel(), sites=FixedSites(sites))
    a.restore(1, np.zeros(N, np.float32), LAYOUT, {})
    return a


def _round(a: Aggregator, deltas: list[np.ndarray]) -> np.ndarray:
    """Push one delta per site on the current version; the model's change."""
    before = a.model.current().flat.copy()
    base = a.model.version
    for i, d in enumerate(deltas):
        a.submit(_Push(f"site{i}", d, base=base))
    assert a.model.version == base + 1
    return a.model.current().flat - before


def _rdp_epsilon(sigma: float, versions: int, delta: float) -> float:
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(sigma), versions)
    return acc.get_epsilon(delta)


def test_central_clips_each_site_to_c_and_noises_the_mean_with_sigma_c_over_n():
    sigma, clip = 0.5, 2.0
    a = _aggregator(_fed(noise_multiplier=sigma, clip_norm=clip))
    rng = np.random.default_rng(0)
    big = rng.standard_normal(N).astype(np.float32) * 5  # norm ≈ 707: clipped to 2
    small = (big / np.linalg.norm(big) * 0.5).astype(np.float32)  # norm 0.5: within C
    zero = np.zeros(N, np.float32)
    update = _round(a, [big, small, zero])
    expected_mean = (big / np.linalg.norm(big.astype(np.float64)) * clip + small) / 3
    noise = update - expected_mean
    # Noise per element N(0, (σC/n)²) = N(0, (1/3)²): the sample std of 20 000 draws is within 2 % of it
    assert np.std(noise) == pytest.approx(sigma * clip / 3, rel=0.02)
    assert abs(float(np.mean(noise))) < 5 * sigma * clip / 3 / math.sqrt(N)
    # An unclipped `big` would leave big/3 in `noise` (std ≈ 1.7, not 0.33): the clip is C, not more


def test_without_privacy_the_same_round_is_the_exact_mean():
    fed = _fed(noise_multiplier=0.5)
    fed = fed.model_copy(update={"privacy": fed.privacy.model_copy(update={"enabled": False})})
    a = _aggregator(fed)
    rng = np.random.default_rng(1)
    deltas = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
    np.testing.assert_allclose(_round(a, deltas), sum(deltas) / 3, atol=1e-5)
    assert a.privacy.status() == {}


def test_epsilon_after_each_version_is_dp_accountings_and_the_budget_stops_publishing():
    sigma, delta = 1.2, 1e-5
    budget = (_rdp_epsilon(sigma, 3, delta) + _rdp_epsilon(sigma, 4, delta)) / 2  # room for 3 versions, not 4
    a = _aggregator(_fed(noise_multiplier=sigma, delta=delta, epsilon_budget=budget))
    rng = np.random.default_rng(2)
    for k in range(1, 4):
        _round(a, [rng.standard_normal(N).astype(np.float32) * 0.01 for _ in range(3)])
        status = a.privacy.status()
        assert status["privacy_versions"] == k
        assert status["privacy_epsilon"] == pytest.approx(_rdp_epsilon(sigma, k, delta), rel=1e-9)
    assert a.privacy.status()["privacy_spent"] is True
    version = a.model.version
    with pytest.raises(NotPermitted, match="privacy budget spent") as refused:
        a.submit(_Push("site0", np.ones(N, np.float32), base=version))
    assert refused.value.reason == "privacy_budget"
    header = PushHeader(
        base_version=version, upload_id="x", codec_header=b"", payload_bytes=0, num_tokens=1, local_steps=1
    )
    with pytest.raises(NotPermitted, match="privacy budget spent"):
        a.precheck("site1", header, master=False)  # refused before the payload crosses the WAN
    assert a.model.version == version and a.privacy.accountant.versions == 3


def test_on_budget_warn_publishes_on_and_reports_the_overspend(caplog):
    sigma = 1.0
    a = _aggregator(_fed(noise_multiplier=sigma, epsilon_budget=_rdp_epsilon(sigma, 1, 1e-5) * 1.01, on_budget="warn"))
    rng = np.random.default_rng(3)
    with caplog.at_level(logging.WARNING, logger="geofed.ps"):
        for _ in range(2):
            _round(a, [rng.standard_normal(N).astype(np.float32) * 0.01 for _ in range(3)])
    assert a.model.version == 3
    assert "event=privacy_overspent" in caplog.text


def test_accounting_survives_a_ps_restart():
    fed = _fed(noise_multiplier=2.0)
    a = _aggregator(fed)
    rng = np.random.default_rng(4)
    for _ in range(2):
        _round(a, [rng.standard_normal(N).astype(np.float32) * 0.01 for _ in range(3)])
    state = a.state_dict()
    b = Aggregator(fed, GlobalModel(), sites=FixedSites(3))
    b.restore(a.model.version, a.model.current().flat, LAYOUT, state)
    assert b.privacy.accountant.versions == 2
    assert b.privacy.status()["privacy_epsilon"] == pytest.approx(_rdp_epsilon(2.0, 2, 1e-5), rel=1e-9)


def test_adaptive_clipping_moves_c_by_the_geometric_rule():
    clip, lr, quantile = 1.0, 0.2, 0.5
    a = _aggregator(
        _fed(
            noise_multiplier=1.0,
            clip_norm=clip,
            adaptive_clipping=True,
            clip_lr=lr,
            target_quantile=quantile,
            count_noise_multiplier=1e-6,
        )
    )
    rng = np.random.default_rng(5)
    tiny = [rng.standard_normal(N).astype(np.float32) * 1e-4 for _ in range(3)]  # all within C: fraction 1
    _round(a, tiny)
    c1 = clip * math.exp(-lr * (1.0 - quantile))
    assert a.privacy.clip_norm == pytest.approx(c1, rel=1e-5)
    huge = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]  # all clipped: fraction 0
    _round(a, huge)
    assert a.privacy.clip_norm == pytest.approx(c1 * math.exp(lr * quantile), rel=1e-5)
    # the count is a second Gaussian mechanism per version, composed by the accountant
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(
        dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(1.0), dp_accounting.GaussianDpEvent(2e-6)]), 2
    )
    assert a.privacy.status()["privacy_epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)


def test_a_clip_larger_than_every_update_is_warned_about_with_the_numbers(caplog):
    a = _aggregator(_fed(noise_multiplier=1.0, clip_norm=50.0))
    d = np.zeros(N, np.float32)
    d[0] = 3.0
    with caplog.at_level(logging.WARNING, logger="geofed.ps"):
        _round(a, [d, d * 0.5, d * 0.25])
    assert "event=privacy_clip_above_updates clip=50 largest_norm=3 deltas=3" in caplog.text


def test_local_mode_leaves_the_updates_to_the_clients_and_counts_the_versions():
    a = _aggregator(_fed(noise_multiplier=2.0, mode="local", clip_norm=0.1))
    rng = np.random.default_rng(6)
    deltas = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
    np.testing.assert_allclose(_round(a, deltas), sum(deltas) / 3, atol=1e-5)  # no clip, no noise at the PS
    # local: the PS sees each site's update, replace-one adjacency, sensitivity 2C → multiplier σ/2
    assert a.privacy.status()["privacy_epsilon"] == pytest.approx(_rdp_epsilon(1.0, 1, 1e-5), rel=1e-9)
