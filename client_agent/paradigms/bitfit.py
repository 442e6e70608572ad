"""BitFit (Ben Zaken et al., 2022): only bias vectors, and optionally norm scales, are trained and exchanged.

Everything else stays as built: the seeded initialisation every client builds alike, or the pretrained
base in `model.path`. So `shell_ok` is False (the PS never streams the frozen weights).
"""

from __future__ import annotations

from torch import nn

from geofed.paradigms.bitfit import BitFitSettings

from .base import ClientParadigm


def _is_norm(module: nn.Module) -> bool:
    # LayerNorm in GPT-2, LlamaRMSNorm in Llama: matched by type name so no model class is imported here.
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("RMSNorm", "LayerNorm"))


class BitFit(ClientParadigm):
    shell_ok = False

    def __init__(self, settings: BitFitSettings) -> None:
        super().__init__(settings)
        self._names: frozenset[str] = frozenset()

    def prepare(self, model: nn.Module) -> nn.Module:
        names = {n for n, _ in model.named_parameters() if n.rsplit(".", 1)[-1] == "bias"}
        if self.settings.layer_norms:
            for mod_name, module in model.named_modules():
                if _is_norm(module):
                    own = (p for p, _ in module.named_parameters(recurse=False))
                    names.update(f"{mod_name}.{p}" if mod_name else p for p in own)
        self._names = frozenset(names)
        return super().prepare(model)

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        return name in self._names
