"""Hybrid LoRA: the base is exchanged as in pretraining; each client's LoRA adapters stay private.

A round is `lora_steps` steps on the adapters (base frozen), then `base_steps` steps on the base
(adapters frozen); δ covers the base only. The adapters are trainable but not exchanged, so the seam's
`private_state` puts them in the client checkpoint and `load_private_state` restores them on rejoin.
"""

from __future__ import annotations

import dataclasses
import math

from torch import nn

from ..training.trainer import LocalTrainer, TrainStats
from .base import ClientParadigm
from .lora import inject_lora, is_adapter, merged


def _train_only(model: nn.Module, adapters: bool) -> None:
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter(name) == adapters)


class HybridLoRA(ClientParadigm):
    shell_ok = False  # the adapters' base layers are wrapped before the global base arrives

    def prepare(self, model: nn.Module) -> nn.Module:
        return super().prepare(inject_lora(model, self.settings))

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return not is_adapter(name)

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        return True

    def local_update(self, trainer: LocalTrainer, steps: int, deadline: float | None, version: int) -> TrainStats:
        """H_lora steps on the private adapters, then H_base steps on the shared base (`steps` caps the total)."""
        s = self.settings
        lora_steps = min(s.lora_steps, steps)
        base_steps = min(s.base_steps, steps - lora_steps)
        try:
            _train_only(trainer.model, adapters=True)
            private = trainer.train(lora_steps, deadline=deadline)
            _train_only(trainer.model, adapters=False)
            shared = trainer.train(base_steps, deadline=deadline)
        finally:
            for _, param in trainer.model.named_parameters():
                param.requires_grad_(True)
        phases = [p for p in (private, shared) if p.steps and math.isfinite(p.mean_loss)]
        loss = sum(p.mean_loss * p.steps for p in phases) / max(1, sum(p.steps for p in phases))
        # The δ the PS weighs is the base's: its tokens and samples are the base phase's.
        return dataclasses.replace(shared, steps=private.steps + shared.steps, mean_loss=loss if phases else math.nan,
                                   seconds=private.seconds + shared.seconds)

    def export(self, model: nn.Module) -> nn.Module:
        return merged(model)
