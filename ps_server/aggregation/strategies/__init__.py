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

# Every strategy, each found by (its paradigm's name, the delta form it folds): a codec selects the
# paradigm's variant by its `delta_form`, a strategy declares the one it folds.
STRATEGY_CLASSES: tuple[type[Strategy], ...] = (Pretrain, SparsePretrain, BitFit, LoRA, HybridLoRA, Ravan, ZO, FslSage)

STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in STRATEGY_CLASSES if s.delta_form == "dense"}


def strategy_class(paradigm: str, delta_form: str,
                   classes: tuple[type[Strategy], ...] = STRATEGY_CLASSES) -> type[Strategy]:
    """The strategy of `paradigm` that folds `delta_form` deltas; ValueError naming what there is."""
    for cls in classes:
        if cls.name == paradigm and cls.delta_form == delta_form:
            return cls
    forms = sorted(c.delta_form for c in classes if c.name == paradigm)
    if forms:
        takers = sorted(c.name for c in classes if c.delta_form == delta_form)
        raise ValueError(f"paradigm {paradigm!r} folds {' and '.join(forms)} deltas on this PS, not {delta_form} "
                         f"ones (the codec's delta form); {delta_form} deltas are folded for paradigm(s) "
                         f"{', '.join(takers) or 'none'}")
    raise ValueError(f"this PS has no aggregation strategy for paradigm {paradigm!r}; "
                     f"known: {', '.join(sorted({c.name for c in classes}))}")


def build_strategy(fed: FederationConfig) -> Strategy:
    """The strategy for the federation's paradigm and its codec's delta form."""
    return strategy_class(fed.paradigm.name, fed.codec.delta_form)(fed)


__all__ = ["STRATEGIES", "STRATEGY_CLASSES", "Strategy", "build_strategy", "strategy_class"]
