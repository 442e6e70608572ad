"""Checks shared by the adapter paradigms (LoRA, Hybrid LoRA, RAVAN): do the target layers exist and fit?

Run on the real model on every client before it trains, so a base loaded from `model.path` whose layers
differ from its family's defaults is refused with the setting's name, not by a shape error mid-round.
"""

from __future__ import annotations

from torch import nn

from geofed.paradigms.lora import DEFAULT_TARGETS, AdapterSettings

from .base import ParadigmError


def layer_dims(module: nn.Module) -> tuple[int, int] | None:
    """(in, out) features of a linear layer (torch Linear, or transformers' Conv1D with weight (in, out))."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
        n_in, n_out = module.weight.shape
        return int(n_in), int(n_out)
    return None


def target_names(settings: AdapterSettings, model: nn.Module) -> list[str]:
    """The layer names to wrap: `paradigm.target_modules` when set, else the defaults of the model's
    architecture (its `config.model_type`) as peft picks them."""
    model_type = getattr(getattr(model, "config", None), "model_type", "")
    if settings.target_modules or model_type in DEFAULT_TARGETS:
        return settings.targets(model_type)
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    if model_type not in PEFT_TARGETS:
        raise ParadigmError(f"paradigm.target_modules: peft knows no default layers for a {model_type or '?'} "
                            "model; name its layers")
    return list(PEFT_TARGETS[model_type])


def target_layers(model: nn.Module, targets: list[str], rank: int) -> dict[str, nn.Module]:
    """Every layer named by `targets` (last name component), refusing a missing target or a rank too large."""
    found: dict[str, nn.Module] = {}
    linear_names = set()
    for name, module in model.named_modules():
        dims = layer_dims(module)
        if dims is None:
            continue
        last = name.rsplit(".", 1)[-1]
        linear_names.add(last)
        if last in targets or name in targets:
            found[name] = module
            if rank > min(dims):
                raise ParadigmError(f"paradigm.rank {rank} is larger than layer {name}'s smaller dimension "
                                    f"{min(dims)} ({dims[0]} in, {dims[1]} out)")
    missing = [t for t in targets if not any(n == t or n.rsplit(".", 1)[-1] == t for n in found)]
    if missing:
        raise ParadigmError(f"paradigm.target_modules: {', '.join(missing)} names no linear layer of this model "
                            f"(its linear layers: {', '.join(sorted(linear_names))})")
    return found


def is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D"
