"""The `privacy` section of the federation settings: site-level differential privacy (DP-FedAvg).

Each site's update is clipped to an L2 norm C and Gaussian noise of standard deviation σ·C is added, at the
PS to the round's sum (central) or on the client to its own clipped update before it is encoded (local).
The accountant (`geofed.privacy.accountant`, Google's dp-accounting library) turns σ, the number of
published versions and δ into the ε the federation has spent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from geofed.settings_base import Section


class PrivacyConfig(Section):
    """Site-level differential privacy: clip each site's update, add Gaussian noise, account ε at δ."""

    enabled: bool = Field(False, description="Clip every site's update to clip_norm and add Gaussian noise.")
    mode: Literal["central", "local"] = Field(
        "central",
        description="central: the PS clips each site's update and adds N(0, (σ·C)²) to the round's sum "
        "(it sees clipped updates; model receivers see the noised average). local: each client clips and "
        "noises its own update before encoding; the PS sees noised updates (about twice the ε).",
    )
    clip_norm: float = Field(
        1.0,
        gt=0,
        le=1e6,
        description="C: the L2 norm every site's update is clipped to (the starting value under "
        "adaptive_clipping); the PS warns, with the numbers, when it is larger than every update seen.",
    )
    noise_multiplier: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="σ: the noise's standard deviation in units of clip_norm. Set this or target_epsilon.",
    )
    target_epsilon: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="ε the federation may spend over target_rounds published versions; σ is solved from it, δ "
        "and the adaptive-clipping noise with the accountant. Set this or noise_multiplier.",
    )
    target_rounds: int = Field(
        100, ge=1, le=10_000_000, description="target_epsilon: the published versions σ is solved for."
    )
    delta: float = Field(
        1e-5,
        gt=0,
        lt=1,
        description="δ of the (ε, δ) guarantee; must be below 1/sites (a δ that large allows one site's data to "
        "be revealed outright).",
    )
    sites: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Sites in the federation, to check δ < 1/sites; 0: not declared (the PS then warns once "
        "the sites that have pushed make δ ≥ 1/sites).",
    )
    epsilon_budget: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="The most ε the federation may spend; unset: target_epsilon, or no limit when that is unset "
        "too (ε is still accounted and reported).",
    )
    on_budget: Literal["stop", "warn"] = Field(
        "stop",
        description="When the next version would spend more than epsilon_budget: stop (the PS publishes no further "
        "version and refuses every delta with reason privacy_budget, so the clients end) or warn (publish on, "
        "logging and reporting the overspend).",
    )
    accountant: Literal["rdp", "pld"] = Field(
        "rdp",
        description="dp-accounting's Rényi-DP accountant, or its privacy-loss-distribution accountant "
        "(tighter ε, slower).",
    )
    adaptive_clipping: bool = Field(
        False,
        description="central: adapt C each round towards the target_quantile of the sites' update norms from a "
        "noised count of the updates within C (Andrew et al. 2021, geometric update); the count's noise is "
        "accounted too.",
    )
    target_quantile: float = Field(
        0.5, gt=0, lt=1, description="adaptive_clipping: the fraction of site updates C should leave unclipped."
    )
    clip_lr: float = Field(
        0.2, gt=0, le=10, description="adaptive_clipping: η of C ← C·exp(−η·(noised unclipped fraction − quantile))."
    )
    count_noise_multiplier: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="adaptive_clipping: σ_b, the standard deviation of the Gaussian noise on the count of unclipped "
        "updates (each site adds ±½; TensorFlow Federated's default is 0.05 × the sites per round).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PrivacyConfig:
        if not self.enabled:
            return self
        if self.noise_multiplier is not None and self.target_epsilon is not None:
            if self.noise_multiplier == 0:
                raise ValueError(
                    f"privacy.noise_multiplier 0 adds no noise, so no target_epsilon "
                    f"({self.target_epsilon:g}) can be met; unset noise_multiplier to solve σ from it"
                )
            raise ValueError("privacy: set noise_multiplier or target_epsilon, not both (σ is solved from the target)")
        if self.noise_multiplier is None and self.target_epsilon is None:
            raise ValueError("privacy.enabled needs privacy.noise_multiplier (σ) or privacy.target_epsilon")
        if self.noise_multiplier == 0:
            raise ValueError("privacy.noise_multiplier 0 adds no noise: ε would be infinite; set σ > 0")
        if self.sites and self.delta >= 1.0 / self.sites:
            raise ValueError(
                f"privacy.delta {self.delta:g} is not below 1/sites = {1.0 / self.sites:g} "
                f"({self.sites} sites): such a δ allows one site's data to be revealed outright"
            )
        if self.adaptive_clipping and self.mode == "local":
            raise ValueError(
                "privacy.adaptive_clipping needs mode 'central': under local DP each client clips "
                "alone and the PS has no private count of unclipped updates to adapt C from"
            )
        if (
            self.epsilon_budget is not None
            and self.target_epsilon is not None
            and self.epsilon_budget < self.target_epsilon
        ):
            raise ValueError(
                f"privacy.epsilon_budget {self.epsilon_budget:g} is below target_epsilon "
                f"{self.target_epsilon:g}: σ would be solved for more ε than the budget allows"
            )
        return self

    @property
    def budget(self) -> float | None:
        """The ε the federation may spend (None: no limit)."""
        return self.epsilon_budget if self.epsilon_budget is not None else self.target_epsilon


def check_federation(
    privacy: PrivacyConfig,
    *,
    paradigm: str,
    folds_as_mean: bool,
    paradigm_settings: dict | None = None,
    weighting: str,
    fednova: bool,
    robust: str,
    groups: int,
    ps_shards: int,
) -> None:
    """Refuse (ValueError) the rest of a federation's settings when they break the privacy guarantee."""
    if not privacy.enabled:
        return
    if not folds_as_mean:
        raise ValueError(
            f"privacy needs a paradigm whose PS averages the sites' clipped updates (such as pretrain, bitfit, "
            f"lora with aggregation 'separate'), not {paradigm!r}"
            + "".join(f" with {k} {v!r}" for k, v in (paradigm_settings or {}).items() if k != "name")
        )
    if ps_shards > 1:
        raise ValueError(
            "privacy needs ps_shards 1: a sharded PS's front folds slices without the privacy clip, "
            "noise and accountant"
        )
    if groups:
        raise ValueError(
            "privacy needs one PS (no groups): in central mode each PS would add its own noise to the ring's "
            "shared round, and a PS that rejoins its ring adopts versions its accountant did not count"
        )
    if privacy.mode != "central":
        return
    if weighting != "uniform":
        raise ValueError(
            f"privacy mode 'central' needs aggregation.weighting 'uniform' (got {weighting!r}): with "
            "token weights one site's share of the average is not bounded by C / sites"
        )
    if fednova:
        raise ValueError(
            "privacy mode 'central' does not combine with aggregation.fednova (it rescales a site's "
            "update by its step count, beyond the clip)"
        )
    if robust != "none":
        raise ValueError(
            f"privacy mode 'central' needs aggregation.robust 'none' (got {robust!r}): the noise is "
            "calibrated to a mean of clipped updates, not to order statistics"
        )
