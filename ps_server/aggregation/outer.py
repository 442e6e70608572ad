"""Outer optimizers: the PS's step on the averaged client delta (Algorithm 1, step 13, and better).

The averaged delta Δ is a pseudo-gradient g = -Δ (DiLoCo). FedAvg applies θ += η·Δ; Nesterov is
DiLoCo's outer step (torch SGD, nesterov=True); Adam is FedOpt's FedAdam. Everything runs in place on
flat fp32 numpy buffers, slice by slice, so temporaries stay O(slice), never O(model): each
optimizer turns the averaged delta *in place* into the increment u, and the PS builds θ + u in that
same buffer, so an outer step needs no model-sized allocation beyond the optimizer's own state.

Each class names its `geofed.outer_optimizers.OuterSpec` (the facts the settings and clients read too) and
enters `OUTER_OPTIMIZERS` under that name by being defined.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from geofed.config import AggregationConfig
from geofed.outer_optimizers import ADAM, FEDAVG, NESTEROV, OuterSpec

_SLICE = 1 << 22  # elements per in-place slice: bounds temporaries to ~16 MiB


def _slices(n: int):
    for start in range(0, n, _SLICE):
        yield slice(start, min(n, start + _SLICE))


OUTER_OPTIMIZERS: dict[str, type[OuterOptimizer]] = {}
"""The PS's step for each `OuterSpec` name; a subclass of `OuterOptimizer` that sets `spec` enters it."""


class OuterOptimizer(ABC):
    """Applies an averaged delta to the flat global parameters, in place."""

    spec: ClassVar[OuterSpec]
    name: ClassVar[str] = ""
    lr: float
    """η, the global learning rate it steps with; the strategy sets the live mode's before each step."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "spec" in cls.__dict__:
            if cls.spec.name in OUTER_OPTIMIZERS:
                raise ValueError(f"outer optimizer {cls.spec.name!r} has two PS steps")
            cls.name = cls.spec.name
            OUTER_OPTIMIZERS[cls.name] = cls

    @classmethod
    @abstractmethod
    def build(cls, cfg: AggregationConfig, numel: int) -> OuterOptimizer:
        """This step for the federation's aggregation settings and a `numel`-element model."""

    @abstractmethod
    def increment_(self, delta: np.ndarray) -> None:
        """Overwrite the averaged delta Δ with the increment u, so that θ_new = θ + u."""

    def scale_state_(self, factor: float) -> None:  # noqa: B027 - stateless default
        """Scale what the optimizer carries into later rounds (its momentum) by `factor` (outer_bound)."""

    def state_dict(self) -> dict[str, np.ndarray | float | int | str]:
        return {"name": self.name}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027 - stateless default
        """Restore optimizer state saved by `state_dict`."""


def restore_outer(outer: OuterOptimizer, state: dict) -> str | None:
    """Load saved outer-optimizer state into `outer`; return why it was reset instead, or None.

    Changing `outer_optimizer` between restarts is a deliberate settings change: the old optimizer's
    momentum means nothing to the new one, so it starts fresh (and says so) instead of crashing on a
    missing key. A state holding NaN/Inf (written before finiteness was enforced) is dropped too: one
    non-finite momentum entry would otherwise poison every later round.
    """
    saved = state.get("name") or _guess_name(state)
    if saved != outer.name:
        return f"outer optimizer changed from {saved!r} to {outer.name!r}: its state starts fresh"
    arrays = [np.asarray(v) for v in state.values() if isinstance(v, np.ndarray)]
    if any(not np.isfinite(a).all() for a in arrays):
        return f"saved {outer.name} state holds non-finite values: it starts fresh"
    outer.load_state_dict(state)
    return None


def _guess_name(state: dict) -> str:
    """Checkpoints from before the name was saved: infer it from the keys."""
    if "buf" in state:
        return "nesterov"
    if "m" in state:
        return "adam"
    return "fedavg"


class FedAvg(OuterOptimizer):
    """θ ← θ + η·Δ; η = 1 is plain federated averaging."""

    spec = FEDAVG

    @classmethod
    def build(cls, cfg: AggregationConfig, numel: int) -> FedAvg:
        return cls(cfg.outer_lr)

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def increment_(self, delta: np.ndarray) -> None:
        delta *= np.float32(self.lr)


class Nesterov(OuterOptimizer):
    """DiLoCo's outer step: SGD with Nesterov momentum on g = -Δ (buf ← μ·buf + g; θ ← θ - η(g + μ·buf))."""

    spec = NESTEROV

    @classmethod
    def build(cls, cfg: AggregationConfig, numel: int) -> Nesterov:
        return cls(cfg.outer_lr, cfg.momentum, numel)

    def __init__(self, lr: float, momentum: float, numel: int) -> None:
        self.lr, self.momentum = lr, momentum
        self.buf = np.zeros(numel, dtype=np.float32)

    def increment_(self, delta: np.ndarray) -> None:
        mu, lr = np.float32(self.momentum), np.float32(self.lr)
        for s in _slices(delta.size):
            d = delta[s]  # view; g = -d
            b = self.buf[s]
            b *= mu
            b -= d  # buf ← μ·buf + g
            d -= mu * b  # -(g + μ·buf)
            d *= lr

    def scale_state_(self, factor: float) -> None:
        self.buf *= np.float32(factor)

    def state_dict(self) -> dict:
        return {"name": self.name, "buf": self.buf}

    def load_state_dict(self, state: dict) -> None:
        self.buf = np.asarray(state["buf"], dtype=np.float32).copy()


class Adam(OuterOptimizer):
    """FedAdam (Reddi et al., FedOpt) with bias correction; ε plays FedOpt's τ."""

    spec = ADAM

    @classmethod
    def build(cls, cfg: AggregationConfig, numel: int) -> Adam:
        return cls(cfg.outer_lr, cfg.beta1, cfg.beta2, cfg.adam_eps, numel)

    def __init__(self, lr: float, beta1: float, beta2: float, eps: float, numel: int) -> None:
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(numel, dtype=np.float32)
        self.v = np.zeros(numel, dtype=np.float32)
        self.t = 0

    def increment_(self, delta: np.ndarray) -> None:
        self.t += 1
        b1, b2 = np.float32(self.beta1), np.float32(self.beta2)
        c1 = 1.0 - self.beta1**self.t
        c2 = 1.0 - self.beta2**self.t
        step_size = np.float32(self.lr / c1)
        for s in _slices(delta.size):
            d = delta[s]  # view; g = -d
            m, v = self.m[s], self.v[s]
            m *= b1
            m -= (1 - b1) * d
            v *= b2
            v += (1 - b2) * d * d
            denom = np.sqrt(v / np.float32(c2))
            denom += np.float32(self.eps)
            np.divide(m, denom, out=d)
            d *= -step_size

    def scale_state_(self, factor: float) -> None:
        self.m *= np.float32(factor)  # the first moment carries the direction; v only normalises it

    def state_dict(self) -> dict:
        return {"name": self.name, "m": self.m, "v": self.v, "t": self.t}

    def load_state_dict(self, state: dict) -> None:
        self.m = np.asarray(state["m"], dtype=np.float32).copy()
        self.v = np.asarray(state["v"], dtype=np.float32).copy()
        self.t = int(state["t"])


def build_outer_optimizer(cfg: AggregationConfig, numel: int) -> OuterOptimizer:
    """The outer optimizer named in the federation's aggregation settings."""
    try:
        step = OUTER_OPTIMIZERS[cfg.outer_optimizer]
    except KeyError:
        raise ValueError(f"outer optimizer {cfg.outer_optimizer!r} has no PS step in this version") from None
    return step.build(cfg, numel)
