"""ε of a DP-FedAvg federation from Google's dp-accounting library (RDP or PLD), never a hand-written bound.

Each published version is one release of the round's mechanism to everyone who receives the model:
- central: the noised sum of the sites' clipped updates, a Gaussian mechanism of noise multiplier σ
  (add/remove-one-site adjacency: one site moves the sum by at most C), composed under adaptive
  clipping with the noised count of unclipped updates (each site adds ±½, noise σ_b: multiplier 2σ_b);
- local: every site's own noised update; the PS sees it alone, so the adjacency is replacing the site's
  data and the sensitivity is 2C: noise multiplier σ / 2.
A site contributes at most one delta to a round (the PS's site quota), so a site is in at most one
mechanism per version and the worst-case site is in every version: the versions compose. Sites are not
sampled at random (they push when they are ready), so no amplification by sampling is claimed: the
sampling rate is 1.
"""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from .settings import PrivacyConfig


def _fresh(kind: str) -> dp_accounting.PrivacyAccountant:
    if kind == "pld":
        return pld_privacy_accountant.PLDAccountant()
    return rdp_privacy_accountant.RdpAccountant()


def round_event(mode: str, noise_multiplier: float, count_noise: float | None = None) -> dp_accounting.DpEvent:
    """The mechanism one published version releases (see the module docstring)."""
    if mode == "local":
        return dp_accounting.GaussianDpEvent(noise_multiplier / 2.0)
    delta_event = dp_accounting.GaussianDpEvent(noise_multiplier)
    if count_noise is None:
        return delta_event
    return dp_accounting.ComposedDpEvent([delta_event, dp_accounting.GaussianDpEvent(count_noise)])


def _count_noise(cfg: PrivacyConfig) -> float | None:
    """The count mechanism's noise multiplier: σ_b over its sensitivity ½ (adaptive clipping only)."""
    return 2.0 * cfg.count_noise_multiplier if cfg.adaptive_clipping and cfg.mode == "central" else None


def solve_noise_multiplier(cfg: PrivacyConfig) -> float:
    """σ: the configured one, or the smallest that keeps target_rounds versions within target_epsilon at δ."""
    if cfg.noise_multiplier is not None:
        return cfg.noise_multiplier
    assert cfg.target_epsilon is not None, "PrivacyConfig validation requires σ or a target ε"
    count = _count_noise(cfg)
    if count is not None:  # the count's own ε must leave room for the updates'
        alone = epsilon_of(cfg.accountant, dp_accounting.GaussianDpEvent(count), cfg.target_rounds, cfg.delta)
        if alone >= cfg.target_epsilon:
            raise ValueError(
                f"privacy.target_epsilon {cfg.target_epsilon:g} is spent by the adaptive-clipping count "
                f"alone (ε {alone:.3g} over {cfg.target_rounds} versions at count_noise_multiplier "
                f"{cfg.count_noise_multiplier:g}): raise count_noise_multiplier or target_epsilon"
            )
    try:
        return float(
            dp_accounting.calibrate_dp_mechanism(
                lambda: _fresh(cfg.accountant),
                lambda z: dp_accounting.SelfComposedDpEvent(round_event(cfg.mode, z, count), cfg.target_rounds),
                cfg.target_epsilon,
                cfg.delta,
                bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
                tol=1e-4,
            )
        )
    except dp_accounting.NoBracketIntervalFoundError as exc:
        raise ValueError(
            f"privacy: no noise multiplier reaches ε {cfg.target_epsilon:g} at δ {cfg.delta:g} over "
            f"{cfg.target_rounds} versions ({exc})"
        ) from None


def epsilon_of(kind: str, event: dp_accounting.DpEvent, versions: int, delta: float) -> float:
    """ε at δ after `versions` releases of `event`, by the `kind` ('rdp' or 'pld') accountant."""
    if versions <= 0:
        return 0.0
    accountant = _fresh(kind)
    accountant.compose(event, versions)
    eps = float(accountant.get_epsilon(delta))
    return eps if math.isfinite(eps) else math.inf


class Accountant:
    """ε spent after each published version, at the configured δ."""

    def __init__(self, cfg: PrivacyConfig) -> None:
        self.cfg = cfg
        self.noise_multiplier = solve_noise_multiplier(cfg)
        self.event = round_event(cfg.mode, self.noise_multiplier, _count_noise(cfg))
        self.versions = 0  # published versions that released a mechanism
        self._known: dict[int, float] = {}  # versions -> ε (the PLD accountant takes seconds per composition)

    def epsilon(self, versions: int | None = None) -> float:
        """ε after `versions` releases (default: those so far)."""
        n = self.versions if versions is None else versions
        if n not in self._known:
            if len(self._known) > 64:
                self._known.clear()
            self._known[n] = epsilon_of(self.cfg.accountant, self.event, n, self.cfg.delta)
        return self._known[n]

    def next_epsilon(self) -> float:
        """ε once the next version is published."""
        return self.epsilon(self.versions + 1)
