"""Restore a name-keyed optimizer state into a single-process optimizer without a warm-up step.

`torch.distributed.checkpoint.set_optimizer_state_dict` first initialises the optimizer's state by running
one step with zero gradients (`_init_optim_state`): for AdamW on a 124M-parameter model that allocates and
computes two model-sized moments only to overwrite them, 2-3 s on a quiet core and 10-15 s on a loaded
one, which alone broke the rejoin goal (process start to first step ≤ 3 s). Without FSDP the parameters are
plain tensors and the saved state is keyed by their names (`get_optimizer_state_dict`'s format), so the
state maps straight onto `Optimizer.load_state_dict`, which keeps the loaded tensors as they are (no copy of
an mmap-ed checkpoint's moments; the first step writes them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class OptimizerStateMismatch(ValueError):
    """The saved optimizer state does not name this optimizer's parameters."""


def load_named_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load `state` ({"state": {name: ...}, "param_groups": [{"params": [name, ...], ...}]}) into `optimizer`."""
    names = {id(p): name for name, p in model.named_parameters()}  # a tied weight keeps its first name
    groups = state.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        raise OptimizerStateMismatch(
            f"saved optimizer has {len(groups) if isinstance(groups, list) else 'no'} parameter groups, "
            f"this one {len(optimizer.param_groups)}"
        )
    native_state: dict[int, Any] = {}
    native_groups = []
    index = 0
    for saved, live in zip(groups, optimizer.param_groups, strict=True):
        expected = [names.get(id(p)) for p in live["params"]]
        if list(saved.get("params", [])) != expected:
            raise OptimizerStateMismatch("saved optimizer parameter names differ from this model's "
                                         f"(group of {len(expected)} parameters)")
        ids = []
        for name in expected:
            if name in state["state"]:
                native_state[index] = state["state"][name]
            ids.append(index)
            index += 1
        native_groups.append({**saved, "params": ids})
    optimizer.load_state_dict({"state": native_state, "param_groups": native_groups})
