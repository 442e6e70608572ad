"""Zeroth-order fine-tuning, client half: one scalar per seed up, the round's scalars down.

A round (`local_update`) estimates, for each of the round's `seeds` directions zₖ (`geofed.zo`, keyed by
the global version it starts from), gₖ = (L(θ + εzₖ) − L(θ − εzₖ)) / 2ε on a fresh batch of its own data:
two forward passes, no backward, no optimizer state. It does not move θ itself; the PS averages the gₖ
and every client applies the same update from the scalars streamed back (`downlink_decoders`), so the
model a client trains on is always exactly a published global version. With `params: lora` the model is
first wrapped with LoRA adapters (`inject_lora`) and only they are perturbed and exchanged.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from geofed import zo
from geofed.paradigms.zo import ZOSettings

from ..training.flat import flatten, load_flat_
from ..training.model import lm_loss
from ..training.trainer import LocalTrainer, TrainStats
from .base import ClientParadigm, DownlinkDecoder
from .bitfit import _is_norm
from .lora import inject_lora, is_adapter, merged

ENCODING = "zo_scalars"  # the PS's ps_server.aggregation.strategies.zo.ENCODING


class ZO(ClientParadigm):
    shell_ok = False  # params=bias or lora leaves the rest frozen as built

    def __init__(self, settings: ZOSettings) -> None:
        super().__init__(settings)
        self._names: frozenset[str] | None = None
        self._scalars = np.zeros(settings.seeds, dtype=np.float32)

    def prepare(self, model: nn.Module) -> nn.Module:
        if self.settings.params == "bias":
            names = {n for n, _ in model.named_parameters() if n.endswith(".bias")}
            for mod_name, module in model.named_modules():
                if _is_norm(module):
                    names.update(f"{mod_name}.{p}" for p, _ in module.named_parameters(recurse=False))
            self._names = frozenset(names)
        elif self.settings.perturbs_adapters:
            model = inject_lora(model, self.settings)
            self._names = frozenset(n for n, _ in model.named_parameters() if is_adapter(n))
        model = super().prepare(model)
        for param in model.parameters():
            param.requires_grad_(False)  # no backward pass: gradients would only cost memory
        return model

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return self._names is None or name in self._names

    def export(self, model: nn.Module) -> nn.Module:
        return merged(model) if self.settings.perturbs_adapters else model

    def payload_numel(self, exchanged_numel: int) -> int:
        return self.settings.seeds

    @torch.no_grad()
    def local_update(self, trainer: LocalTrainer, steps: int, deadline: float | None, version: int) -> TrainStats:
        s, model, cfg = self.settings, trainer.model, trainer.cfg
        model.eval()  # dropout off: both sides of a two-point estimate must see the same function
        t0 = time.monotonic()
        theta = flatten(model, self.exchanged)
        losses = []
        for k in range(s.seeds):
            z = torch.from_numpy(zo.direction(s.seed, version, k, theta.numel()))
            batch = trainer.stream.next_batch(cfg.batch_size).to(trainer.device)
            load_flat_(model, theta + s.eps * z, self.exchanged)
            plus = float(lm_loss(model, batch))
            load_flat_(model, theta - s.eps * z, self.exchanged)
            minus = float(lm_loss(model, batch))
            self._scalars[k] = (plus - minus) / (2 * s.eps)
            losses.append((plus + minus) / 2)
        load_flat_(model, theta, self.exchanged)  # exactly the global version again
        trainer.step += s.seeds
        seconds = time.monotonic() - t0
        samples = s.seeds * cfg.batch_size
        tokens = samples * trainer.stream.block_size
        return TrainStats(steps=s.seeds, tokens=tokens, samples=samples, mean_loss=float(np.mean(losses)),
                          tokens_per_s=tokens / seconds if seconds > 0 else 0.0, seconds=seconds,
                          stopped_by="steps", lr=s.lr, grad_norm=float(np.linalg.norm(self._scalars)))

    def delta(self, ranks, out: torch.Tensor | None, model: nn.Module, base: np.ndarray | None):
        if out is not None:
            out.copy_(torch.from_numpy(self._scalars))
        return out

    def checkpoint_flat(self, payload: torch.Tensor, base: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(base, dtype=np.float32))  # θ only moves when the PS publishes

    def downlink_decoders(self) -> dict[str, DownlinkDecoder]:
        s = self.settings

        def decode(held: np.ndarray, data: bytes, base_version: int, version: int) -> np.ndarray:
            scalars = np.frombuffer(data, dtype=np.float32)
            if scalars.size != (version - base_version) * s.seeds:
                raise ValueError(f"{scalars.size} scalars do not bring version {base_version} to {version}")
            return zo.replay(held, scalars, seeds=s.seeds, seed=s.seed, base_version=base_version, lr=s.lr)

        return {ENCODING: decode}
