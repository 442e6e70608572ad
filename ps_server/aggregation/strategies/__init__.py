"""Server halves of the training paradigms, one module each, found by the paradigm settings' `name`."""

from __future__ import annotations

from geofed.config import FederationConfig

from ..strategy import Strategy
from .bitfit import BitFit
from .fsl_sage import FslSage
from .hybrid_lora import HybridLoRA
from .lora import LoRA
from .pretrain import Pretrain
from .ravan import Ravan
from .zo import ZO

STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s for s in (Pretrain, BitFit, LoRA, HybridLoRA, Ravan, ZO, FslSage)
}


def build_strategy(fed: FederationConfig) -> Strategy:
    """The strategy for the federation's paradigm."""
    try:
        return STRATEGIES[fed.paradigm.name](fed)
    except KeyError:
        raise ValueError(
            f"this PS has no aggregation strategy for paradigm {fed.paradigm.name!r}; "
            f"known: {', '.join(sorted(STRATEGIES))}"
        ) from None


__all__ = ["STRATEGIES", "Strategy", "build_strategy"]
