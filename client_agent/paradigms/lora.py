"""Federated LoRA (FedIT) with peft: adapters injected on the frozen base, only lora_A and lora_B exchanged.

The base must be identical on every client: the pretrained `model.path` (or the seeded init), never
streamed. The master's adapters (peft's init: A Kaiming-uniform, B zero) are Θ0; every other client adopts
them from the PS. `merged(model)` folds the adapters into the base for export.
"""

from __future__ import annotations

from torch import nn

from geofed.paradigms.lora import AdapterSettings

from .adapters import is_conv1d, target_layers, target_names
from .base import ClientParadigm


def inject_lora(model: nn.Module, settings: AdapterSettings) -> nn.Module:
    """`model` wrapped by peft with the settings' adapters, after checking targets and rank on its layers."""
    # peft (and the transformers it pulls in) takes ~2.7 s to import: only a LoRA client pays it, not the
    # start-up of every client.
    from peft import LoraConfig, get_peft_model

    targets = target_names(settings, model)
    layers = target_layers(model, targets, settings.rank)
    config = LoraConfig(
        r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
        target_modules=targets,
        fan_in_fan_out=any(is_conv1d(m) for m in layers.values()),  # GPT-2's Conv1D stores (in, out)
        bias="none",
    )
    return get_peft_model(model, config)


def is_adapter(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def merged(model: nn.Module) -> nn.Module:
    """The plain transformers model with the adapters folded into its weights (peft's merge_and_unload)."""
    return model.merge_and_unload()


class LoRA(ClientParadigm):
    shell_ok = False

    def prepare(self, model: nn.Module) -> nn.Module:
        return super().prepare(inject_lora(model, self.settings))

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return is_adapter(name)

    def export(self, model: nn.Module) -> nn.Module:
        return merged(model)
