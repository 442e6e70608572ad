"""What the settings, the PS and the clients know of each outer optimizer: one `OuterSpec` declaration each.

The PS's step itself is a class in `ps_server.aggregation.outer` that names its spec (`OuterOptimizer.spec`).
FedAvg, Nesterov (DiLoCo) and Adam (FedAdam) are declared here; a spec declared anywhere else enters
`OUTER_SPECS` the same way, by being constructed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class OuterSettings(Protocol):
    """The aggregation settings a spec's facts read (`geofed.config.AggregationConfig`)."""

    mode: str
    momentum: float
    beta1: float


def _never(cfg: OuterSettings) -> bool:
    return False


def _always(cfg: OuterSettings) -> bool:
    return True


OUTER_SPECS: dict[str, OuterSpec] = {}
"""Every outer optimizer a federation can name (`aggregation.outer_optimizer`), in declaration order."""


@dataclass(frozen=True)
class OuterSpec:
    """One outer optimizer's facts.

    `lr`: its own global learning rate η, used when `aggregation.global_lr` is unset.
    `momentum`: whether its step carries earlier rounds' updates forward (so the model overshoots along them;
    it keeps clients off the overlapped path).
    `deltas_agree`: whether honest deltas point along what the other sites' recent deltas add up to, so that
    one pointing clearly against them is an attack (the PS's consensus bound applies). They do under FedAvg
    and under Adam, whose momentum is normalised per coordinate (each step moves a coordinate by about η at
    most; docs/reliability.md); not where the step carries momentum at full length (Nesterov): the model then
    overshoots along the recent deltas and honest deltas point back against them.
    """

    name: str
    lr: Callable[[OuterSettings], float]
    momentum: Callable[[OuterSettings], bool] = _never
    deltas_agree: Callable[[OuterSettings], bool] = _always

    def __post_init__(self) -> None:
        if self.name in OUTER_SPECS:
            raise ValueError(f"outer optimizer {self.name!r} is declared twice")
        OUTER_SPECS[self.name] = self


def outer_spec(name: str) -> OuterSpec:
    """The spec `aggregation.outer_optimizer` names; ValueError, listing the known ones, for any other name."""
    try:
        return OUTER_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown outer optimizer {name!r}; known: {', '.join(OUTER_SPECS)}") from None


FEDAVG_LR = 0.5
"""FedAvg's η where deltas arrive one at a time (async: FedAsync-style mixing; docs/benchmarks.md)."""
FEDAVG_SYNC_LR = 1.0
"""FedAvg's η in synchronous rounds, whose update is already the mean of every site's delta: plain FedAvg."""

FEDAVG = OuterSpec("fedavg", lr=lambda cfg: FEDAVG_SYNC_LR if cfg.mode == "sync" else FEDAVG_LR)
NESTEROV = OuterSpec(
    "nesterov",
    # A delta's total weight over the steps momentum carries it, η/(1 − μ), stays FedAvg's.
    lr=lambda cfg: FEDAVG_LR * (1.0 - cfg.momentum),
    momentum=lambda cfg: cfg.momentum > 0,
    deltas_agree=lambda cfg: cfg.momentum == 0,
)
ADAM = OuterSpec("adam", lr=lambda cfg: 0.01, momentum=lambda cfg: cfg.beta1 > 0)
