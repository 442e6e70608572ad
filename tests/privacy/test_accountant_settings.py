"""The privacy accountant against dp_accounting computed here from the raw parameters, σ solved from a target ε,
and the settings that would give no (or a broken) guarantee refused with the number."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from pydantic import ValidationError

from geofed.config import FederationConfig
from geofed.privacy.accountant import Accountant, solve_noise_multiplier
from geofed.privacy.settings import PrivacyConfig


def _library(kind: str, events: list[dp_accounting.DpEvent], delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant() if kind == "pld" else rdp_privacy_accountant.RdpAccountant()
    for event in events:
        acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize(
    ("kind", "versions"),
    [("rdp", 1), ("rdp", 7), ("pld", 1), pytest.param("pld", 5, marks=pytest.mark.slow)],  # PLD: seconds a call
)
def test_central_epsilon_is_the_librarys_for_sigma_versions_and_delta(kind, versions):
    sigma, delta = 1.3, 1e-6
    acc = Accountant(PrivacyConfig(enabled=True, noise_multiplier=sigma, delta=delta, accountant=kind))
    acc.versions = versions
    events = [dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), versions)]
    assert acc.epsilon() == pytest.approx(_library(kind, events, delta), rel=1e-6)


def test_local_epsilon_is_a_gaussian_of_half_the_multiplier():
    acc = Accountant(PrivacyConfig(enabled=True, noise_multiplier=3.0, mode="local"))
    acc.versions = 5
    assert acc.epsilon() == pytest.approx(_library("rdp", [dp_accounting.GaussianDpEvent(1.5)] * 5, 1e-5), rel=1e-9)


def test_adaptive_clipping_composes_the_count_mechanism():
    acc = Accountant(
        PrivacyConfig(enabled=True, noise_multiplier=1.0, adaptive_clipping=True, count_noise_multiplier=4.0)
    )
    acc.versions = 10
    # the count: each site adds ±½ (sensitivity ½) with noise σ_b = 4: multiplier 8
    events = [dp_accounting.GaussianDpEvent(1.0), dp_accounting.GaussianDpEvent(8.0)] * 10
    assert acc.epsilon() == pytest.approx(_library("rdp", events, 1e-5), rel=1e-9)


def test_rdp_of_a_gaussian_matches_its_closed_form_bound():
    # RDP of the Gaussian mechanism: α / (2σ²) per release (Mironov 2017); ε ≤ min_α T·α/(2σ²) + log(1/δ)/(α−1)
    sigma, versions, delta = 2.0, 50, 1e-5
    acc = Accountant(PrivacyConfig(enabled=True, noise_multiplier=sigma, delta=delta))
    acc.versions = versions
    classic = min(
        versions * a / (2 * sigma**2) + math.log(1 / delta) / (a - 1) for a in [1 + x / 100 for x in range(1, 20000)]
    )
    assert acc.epsilon() <= classic + 1e-9
    assert acc.epsilon() > 0.8 * classic  # the library's conversion is tighter, not a different quantity


def test_sigma_solved_from_a_target_spends_the_target_over_target_rounds():
    cfg = PrivacyConfig(enabled=True, target_epsilon=4.0, target_rounds=40, delta=1e-5)
    sigma = solve_noise_multiplier(cfg)
    at_target = _library("rdp", [dp_accounting.GaussianDpEvent(sigma)] * 40, 1e-5)
    assert at_target <= 4.0 and at_target == pytest.approx(4.0, rel=1e-3)
    assert _library("rdp", [dp_accounting.GaussianDpEvent(sigma * 0.99)] * 40, 1e-5) > 4.0  # the smallest σ
    assert Accountant(cfg).cfg.budget == 4.0  # the target is the budget unless one is set


def test_a_target_the_count_alone_spends_is_refused_with_the_number():
    cfg = PrivacyConfig(
        enabled=True, target_epsilon=1.0, target_rounds=100, adaptive_clipping=True, count_noise_multiplier=1.0
    )
    with pytest.raises(ValueError, match=r"spent by the adaptive-clipping count alone \(ε [0-9.]+ over 100"):
        solve_noise_multiplier(cfg)


@pytest.mark.parametrize(
    ("privacy", "message"),
    [
        ({"noise_multiplier": 0.0, "target_epsilon": 2.0}, "noise_multiplier 0 adds no noise, so no target_epsilon"),
        ({"noise_multiplier": 0.0}, "ε would be infinite"),
        ({"noise_multiplier": 1.0, "target_epsilon": 2.0}, "not both"),
        ({}, "needs privacy.noise_multiplier"),
        ({"noise_multiplier": 1.0, "sites": 10, "delta": 0.2}, r"delta 0.2 is not below 1/sites = 0.1 \(10 sites\)"),
        ({"noise_multiplier": 1.0, "mode": "local", "adaptive_clipping": True}, "adaptive_clipping needs mode"),
        ({"target_epsilon": 5.0, "epsilon_budget": 2.0}, "epsilon_budget 2 is below target_epsilon 5"),
    ],
)
def test_inconsistent_privacy_settings_are_refused(privacy, message):
    with pytest.raises(ValidationError, match=message):
        PrivacyConfig(enabled=True, **privacy)


UNIFORM = {"weighting": "uniform"}


@pytest.mark.parametrize(
    ("rest", "message"),
    [
        ({"aggregation": {}}, "needs aggregation.weighting 'uniform' \\(got 'tokens'\\)"),
        ({"aggregation": {**UNIFORM, "fednova": True}}, "does not combine with aggregation.fednova"),
        ({"aggregation": {**UNIFORM, "robust": "median"}}, "needs aggregation.robust 'none'"),
        ({"aggregation": UNIFORM, "paradigm": "zo"}, "not 'zo'"),
        ({"aggregation": UNIFORM, "paradigm": {"name": "lora", "aggregation": "product"}}, "aggregation 'product'"),
        ({"aggregation": UNIFORM, "ps_shards": 2}, "privacy needs ps_shards 1"),
        ({"aggregation": UNIFORM, "groups": [{"name": "a"}, {"name": "b"}]}, "privacy needs one PS"),
    ],
)
def test_federation_settings_that_break_central_dp_are_refused(rest, message):
    with pytest.raises(ValidationError, match=message):
        FederationConfig.model_validate({"privacy": {"enabled": True, "noise_multiplier": 1.0}, **rest})


def test_local_dp_takes_token_weights_and_central_dp_takes_the_sparse_codec():
    FederationConfig.model_validate({"privacy": {"enabled": True, "noise_multiplier": 1.0, "mode": "local"}})
    fed = FederationConfig.model_validate(
        {"privacy": {"enabled": True, "noise_multiplier": 1.0}, "aggregation": UNIFORM, "codec": {"name": "sparse"}}
    )
    assert fed.privacy.enabled  # noise before top-k and quantisation: post-processing keeps the guarantee
    FederationConfig.model_validate({"privacy": {"enabled": False, "noise_multiplier": 0.0}})  # off: not checked
