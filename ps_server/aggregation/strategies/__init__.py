"""Server halves of the training paradigms, one module each, found from the settings that name them
(`ParadigmSettings.strategies`, one for each delta form the paradigm folds)."""

from __future__ import annotations

from geofed.config import FederationConfig
from geofed.paradigms import PARADIGMS, ParadigmSettings, import_half

from ..strategy import Strategy


def strategy_class(paradigm: type[ParadigmSettings], delta_form: str) -> type[Strategy]:
    """The strategy of `paradigm` that folds `delta_form` deltas (the codec's); ValueError naming what there is."""
    name = paradigm.model_fields["name"].default
    if delta_form in paradigm.strategies:
        return import_half(paradigm.strategies[delta_form])
    if paradigm.strategies:
        takers = [n for n, s in PARADIGMS.items() if delta_form in s.strategies]
        raise ValueError(f"paradigm {name!r} folds {' and '.join(sorted(paradigm.strategies))} deltas on this PS, not "
                         f"{delta_form} ones (the codec's delta form); {delta_form} deltas are folded for paradigm(s) "
                         f"{', '.join(takers) or 'none'}")
    raise ValueError(f"this PS has no aggregation strategy for paradigm {name!r}; "
                     f"known: {', '.join(sorted(PARADIGMS))}")


def build_strategy(fed: FederationConfig) -> Strategy:
    """The strategy for the federation's paradigm and its codec's delta form."""
    return strategy_class(type(fed.paradigm), fed.codec.delta_form)(fed)


__all__ = ["Strategy", "build_strategy", "strategy_class"]
