"""The seam every training paradigm plugs into (Algorithm 1, steps 3 and 13).

A paradigm decides (a) how a client reparametrises the model before training, (b) which parameters
ϕ(θ) are trained and exchanged, and (c) how the PS folds the averaged exchange back. Pretraining is the
identity case: ϕ = θ, all parameters, folded by the outer optimizer. Federated LoRA would return only
the adapter tensors from `select`; Hybrid LoRA would train private adapters that `select` excludes;
zeroth-order would exchange a scalar per seed. The PS only ever sees the flat ϕ and its manifest, so
adding one of these changes this module and the client, not the wire or the aggregator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import nn


class Paradigm(Protocol):
    """What a fine-tuning or pretraining scheme must define."""

    name: str

    def prepare(self, model: nn.Module) -> nn.Module:
        """Reparametrise the freshly built model (e.g. inject adapters); step 3's ϕ := ϕ(θ)."""
        ...

    def select(self, name: str, param: nn.Parameter) -> bool:
        """True for the parameters that are trained *and* exchanged with the PS."""
        ...


class Pretrain:
    """Identity reparametrisation: every parameter is trained and exchanged (paper §III-C1)."""

    name = "pretrain"

    def prepare(self, model: nn.Module) -> nn.Module:
        return model

    def select(self, name: str, param: nn.Parameter) -> bool:
        return True


PARADIGMS: dict[str, type] = {"pretrain": Pretrain}


def get_paradigm(name: str) -> Paradigm:
    """The paradigm named in the federation settings."""
    try:
        return PARADIGMS[name]()
    except KeyError:
        raise ValueError(f"unknown paradigm {name!r}; known: {', '.join(sorted(PARADIGMS))}") from None
