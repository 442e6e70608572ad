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
from .sparse_pretrain import SparsePretrain
from .zo import ZO

STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s for s in (Pretrain, BitFit, LoRA, HybridLoRA, Ravan, ZO, FslSage)
}


# codec "sparse" swaps in a paradigm's sparse strategy: sparse folding and model stream.
SPARSE_STRATEGIES: dict[str, type[Strategy]] = {SparsePretrain.name: SparsePretrain}


def build_strategy(fed: FederationConfig) -> Strategy:
    """The strategy for the federation's paradigm (its sparse variant under codec 'sparse')."""
    if fed.codec.name == "sparse":
        if fed.paradigm.name not in SPARSE_STRATEGIES:
            raise ValueError(f"codec 'sparse' is available for paradigm(s) {', '.join(SPARSE_STRATEGIES)}, "
                             f"not {fed.paradigm.name!r}")
        return SPARSE_STRATEGIES[fed.paradigm.name](fed)
    try:
        return STRATEGIES[fed.paradigm.name](fed)
    except KeyError:
        raise ValueError(
            f"this PS has no aggregation strategy for paradigm {fed.paradigm.name!r}; "
            f"known: {', '.join(sorted(STRATEGIES))}"
        ) from None


__all__ = ["STRATEGIES", "Strategy", "build_strategy"]
