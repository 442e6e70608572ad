"""DP-FedAvg at the PS, behind three calls of the Aggregator: `admit`, `bound` and `noise_`.

- `admit` / `bound` (every push, after the guard's own bounds): refuse the delta once the next version would
  spend more than the budget (on_budget 'stop'); in central mode scale the site's update to at most C. The
  DP clip comes in addition to the site norm bound and the displacement budget: both only shrink a delta,
  so a site's update stays within C. They compare a site's norm with the other sites' recent norms, so
  where they cut an update below C, one site's data moved another's contribution: logged as
  `event=privacy_bound_below_clip` (docs/privacy.md).
- `noise_` (every closed round, before the outer step): central mode adds N(0, (σ·C / n)²) to each element of
  the round's mean of n clipped updates, i.e. N(0, (σ·C)²) to their sum (uniform weights: the settings
  refuse token weights, FedNova and robust means under central DP); under adaptive clipping C then moves
  (`adaptive.AdaptiveClip`). Either mode counts the version in the accountant, local mode's noise having
  been added on the clients.
Everything after `noise_` (outer optimizer, its bounds, the downlink's rounding, a sparse re-sparsification)
is post-processing of the noised mean. Disabled, every call returns at once.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from geofed.config import FederationConfig
from geofed.privacy.noise import add_gaussian_

from ..aggregation.norm_bound import BoundedPayload
from ..aggregation.strategy import RoundSum
from ..aggregation.weighting import clip_scale
from ..errors import NotPermitted
from .adaptive import AdaptiveClip

if TYPE_CHECKING:
    from geofed.privacy.accountant import Accountant

log = logging.getLogger("geofed.ps")


class SitePrivacy:
    """The federation's privacy mechanism and its accounting; O(1) state besides the round's buffer."""

    def __init__(self, fed: FederationConfig, rng: np.random.Generator | None = None) -> None:
        self.cfg = cfg = fed.privacy
        self.enabled = cfg.enabled
        self.central = cfg.enabled and cfg.mode == "central"
        self.rng = rng or np.random.default_rng()  # seeded from the OS's entropy
        self.accountant: Accountant | None = None
        if cfg.enabled:  # dp-accounting (with scipy) is imported only by a federation that uses it
            from geofed.privacy.accountant import Accountant

            self.accountant = Accountant(cfg)
        self.adaptive = (
            AdaptiveClip(cfg.clip_norm, cfg.target_quantile, cfg.clip_lr, cfg.count_noise_multiplier, self.rng)
            if self.central and cfg.adaptive_clipping
            else None
        )
        self.fixed_clip = cfg.clip_norm
        self.largest_norm = 0.0  # the largest site update norm seen (before the DP clip)
        self.deltas_seen = 0
        self.sites: set[str] = set()
        self._warned: set[str] = set()

    @property
    def clip_norm(self) -> float:
        """C in force for the open round."""
        return self.adaptive.clip_norm if self.adaptive is not None else self.fixed_clip

    # ---- every push -----------------------------------------------------------------------------

    def admit(self) -> None:
        """Refuse (NotPermitted, reason privacy_budget) a delta once the next version would overspend."""
        if self.accountant is None or self.cfg.on_budget != "stop" or not self.exhausted:
            return
        acc, budget = self.accountant, self.cfg.budget
        raise NotPermitted(
            "privacy_budget",
            f"privacy budget spent: ε {acc.epsilon():.4g} at δ {self.cfg.delta:g} after {acc.versions} versions; one "
            f"more would reach ε {acc.next_epsilon():.4g}, beyond privacy.epsilon_budget {budget:g}; the PS "
            "publishes no further version",
        )

    @property
    def exhausted(self) -> bool:
        """True when publishing one more version would spend beyond the budget."""
        budget = self.cfg.budget
        return self.accountant is not None and budget is not None and self.accountant.next_epsilon() > budget

    def bound(self, bounded: BoundedPayload, pre_bound_norm: float) -> BoundedPayload:
        """The site's update as the round may fold it: within C in central mode (refused when spent)."""
        if not self.enabled:
            return bounded
        self.admit()
        self.largest_norm = max(self.largest_norm, pre_bound_norm)
        self.deltas_seen += 1
        self.sites.add(bounded.site)
        if not self.central:
            return bounded  # local mode: the client clipped and noised it; the PS cannot tell
        clip = self.clip_norm
        if self.adaptive is not None:
            self.adaptive.observe(pre_bound_norm)
        if bounded.scale < 1.0 and bounded.norm < clip:
            log.warning(
                "event=privacy_bound_below_clip site=%r rule=%s norm=%.4g bounded_to=%.4g clip=%.4g",
                bounded.site,
                bounded.rule,
                pre_bound_norm,
                bounded.norm,
                clip,
            )
        scale = clip_scale(bounded.norm, clip)
        return BoundedPayload(bounded, scale, bounded.site, "privacy_clip" if scale < 1.0 else bounded.rule,
                              history_norm=bounded.history_norm * scale)

    # ---- every round ----------------------------------------------------------------------------

    def noise_(self, round_sum: RoundSum) -> None:
        """Noise the round's mean in place (central) and account the version it becomes."""
        if self.accountant is None or round_sum.count == 0:
            return
        if self.central:
            if round_sum.weight <= 0 or not math.isclose(round_sum.weight, round_sum.count):
                raise AssertionError(
                    f"central DP needs uniform weights: round weight {round_sum.weight:g} for {round_sum.count} updates"
                )
            std = self.accountant.noise_multiplier * self.clip_norm / round_sum.count
            add_gaussian_(round_sum.delta, std, self.rng)
            if self.adaptive is not None:
                self.adaptive.round_closed(round_sum.count)
        self.accountant.versions += 1
        self._after_round(round_sum.count)

    def _after_round(self, sites: int) -> None:
        acc, cfg = self.accountant, self.cfg
        assert acc is not None
        eps = acc.epsilon()
        log.info(
            "event=privacy_round versions=%d sites=%d epsilon=%.6g delta=%g noise_multiplier=%.4g clip=%.4g",
            acc.versions,
            sites,
            eps,
            cfg.delta,
            acc.noise_multiplier,
            self.clip_norm,
        )
        budget = cfg.budget
        if budget is not None and eps > budget:
            log.warning("event=privacy_overspent epsilon=%.6g budget=%g on_budget=%s", eps, budget, cfg.on_budget)
        if 0 < self.largest_norm < self.clip_norm and self.adaptive is None:
            self._warn_once(
                "clip",
                "event=privacy_clip_above_updates clip=%.4g largest_norm=%.4g deltas=%d: the noise "
                "σ·C is sized for updates up to C; C near the largest norm gives the same ε with less "
                "noise",
                self.clip_norm,
                self.largest_norm,
                self.deltas_seen,
            )
        if not cfg.sites and len(self.sites) and cfg.delta >= 1.0 / len(self.sites):
            self._warn_once(
                "delta",
                "event=privacy_delta_large delta=%g sites_seen=%d: δ is not below 1/sites = %.3g",
                cfg.delta,
                len(self.sites),
                1.0 / len(self.sites),
            )

    def _warn_once(self, key: str, fmt: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(fmt, *args)

    # ---- reporting and durability ---------------------------------------------------------------

    def status(self) -> dict:
        """The StatusResponse's privacy fields (none when privacy is off)."""
        if self.accountant is None:
            return {}
        acc = self.accountant
        return {
            "privacy_mode": self.cfg.mode,
            "privacy_epsilon": acc.epsilon(),
            "privacy_delta": self.cfg.delta,
            "privacy_budget": self.cfg.budget or 0.0,
            "privacy_versions": acc.versions,
            "privacy_spent": self.exhausted,
            "privacy_clip_norm": self.clip_norm,
            "privacy_noise_multiplier": acc.noise_multiplier,
        }

    def state_dict(self) -> dict:
        if self.accountant is None:
            return {}
        return {
            "versions": self.accountant.versions,
            "clip_norm": self.clip_norm,
            "largest_norm": self.largest_norm,
            "deltas_seen": self.deltas_seen,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume the accounting (ε never restarts from zero with a PS restart)."""
        if self.accountant is None or not state:
            return
        self.accountant.versions = int(state.get("versions", 0))
        if self.adaptive is not None:
            self.adaptive.clip_norm = float(state.get("clip_norm", self.adaptive.clip_norm))
        self.largest_norm = float(state.get("largest_norm", 0.0))
        self.deltas_seen = int(state.get("deltas_seen", 0))
