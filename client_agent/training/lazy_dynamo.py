"""The client's AdamW without importing `torch._dynamo` until something compiles.

torch's optimizers import `torch._dynamo` (and with it sympy) the first time one is used, only so that a
compiled region does not trace into them: `Optimizer.add_param_group`, `zero_grad`, `state_dict` and
`load_state_dict` are wrapped in `torch._compile._disable_dynamo`, and `Adam.step` in
`_use_grad_for_differentiable`, which puts `torch._dynamo.graph_break()` around the update. In a client that
never compiles that import is about 1.5 s of CPU between building the model and its first step.

While `torch._dynamo` is not loaded nothing can be compiling (`torch.compile` imports it), so skipping the
dynamo parts changes nothing. Once it is loaded (a user's model code compiles, or a library imports it), every
call goes through torch's own wrappers again:
- `defer_dynamo_import` fills the cache torch's wrapper keeps on each wrapped method (`__dynamo_disable`) with a
  call that runs the method itself until `torch._dynamo` is loaded, then `torch._dynamo.disable` of it, as
  torch's wrapper does;
- `adamw` builds `torch.optim.AdamW` (a subclass) whose `step` runs Adam's update under `torch.no_grad()`,
  which is what `_use_grad_for_differentiable` does for a non-differentiable optimizer, and torch's own `step`
  once `torch._dynamo` is loaded or for a differentiable one.

On a torch whose optimizers are not wrapped this way, both leave torch's behaviour as it is.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch

_METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_CACHE = "__dynamo_disable"  # the attribute torch's wrapper reads (torch/_compile.py)
_DISABLE_WRAPPER = "_disable_dynamo.<locals>.inner"
_GRAD_WRAPPER = "_use_grad_for_differentiable.<locals>._use_grad"


def _qualname(fn: object) -> str:
    return getattr(getattr(fn, "__code__", None), "co_qualname", "")


def _dynamo_loaded() -> bool:
    return hasattr(sys.modules.get("torch._dynamo"), "disable")


def _until_loaded(fn: Callable[..., Any]) -> Callable[..., Any]:
    disabled: Callable[..., Any] | None = None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal disabled
        if disabled is None:
            if not _dynamo_loaded():
                return fn(*args, **kwargs)
            disabled = sys.modules["torch._dynamo"].disable(fn, True, wrapping=False)
        return disabled(*args, **kwargs)

    return call


def defer_dynamo_import() -> list[str]:
    """Install the deferred call on each wrapped Optimizer method that has not run yet; return their names."""
    deferred = []
    for name in _METHODS:
        wrapper = getattr(torch.optim.Optimizer, name)
        fn = getattr(wrapper, "__wrapped__", None)
        if fn is None or _qualname(wrapper) != _DISABLE_WRAPPER:
            continue
        if getattr(fn, _CACHE, None) is None:
            setattr(fn, _CACHE, _until_loaded(fn))
        deferred.append(name)
    return deferred


def _adam_steps() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """(torch's Adam.step with its grad-mode wrapper, the update inside it), or None if torch wraps it otherwise."""
    wrapped = torch.optim.Adam.__dict__["step"]
    while _qualname(wrapped) != _GRAD_WRAPPER:
        wrapped = getattr(wrapped, "__wrapped__", None)  # the profiling wrapper of an Adam already built
        if wrapped is None:
            return None
    update = inspect.unwrap(wrapped)
    return (wrapped, update) if _qualname(update) == "Adam.step" else None


_STEPS = _adam_steps()


class _AdamW(torch.optim.AdamW):
    """torch's AdamW; its step skips the dynamo graph breaks while `torch._dynamo` is not loaded."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        assert _STEPS is not None
        torch_step, update = _STEPS
        if self.defaults["differentiable"] or _dynamo_loaded():
            return torch_step(self, closure)
        with torch.no_grad():
            return update(self, closure)


def adamw(params: Iterable[Any], **kwargs: Any) -> torch.optim.AdamW:
    """`torch.optim.AdamW(params, **kwargs)` that imports no `torch._dynamo` until something compiles."""
    defer_dynamo_import()
    return (_AdamW if _STEPS is not None else torch.optim.AdamW)(params, **kwargs)
