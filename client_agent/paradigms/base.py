"""Client half of a paradigm (Algorithm 1, client side: step 3's ϕ := ϕ(θ), steps 4-6).

A paradigm says how the freshly built model is reparametrised, which parameters are trained, which of
those are exchanged with the PS (the manifest, in flat-vector order), how the global vector the PS
streams is applied, what goes into δ after local work, and which trained-but-private state must ride in
the client checkpoint so a preempted client gets it back. The agent's loop calls only these hooks, so a
new paradigm is a new file here (plus its settings in `geofed/paradigms/` and its server half in
`ps_server/aggregation/strategies/`), never an edit of the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from geofed.config import FederationConfig
from geofed.paradigms import ParadigmSettings

from ..training.flat import manifest as flat_manifest
from ..training.model import build_model, build_model_shell
from ..training.ranks import Ranks
from ..training.trainer import LocalTrainer, TrainStats
from .frozen import tensors_digest

# (held vector, transfer bytes, base version, version) -> the new vector
DownlinkDecoder = Callable[[np.ndarray, bytes, int, int], np.ndarray]


class ParadigmError(ValueError):
    """The paradigm's settings do not fit this model (refused before the one-time token matters)."""


class ClientParadigm:
    """Pretraining's behaviour, which the other paradigms refine by overriding a hook or two."""

    # Non-exchanged parameters are not streamed by the PS: when a paradigm exchanges only part of the
    # model, every client must build the frozen rest itself (seeded init or `model.path`), so the
    # uninitialised shell that saves a pretraining client a random init (rejoin time) is not allowed.
    shell_ok: ClassVar[bool] = True
    # The data it trains on: preference records (prompt, chosen, rejected) when true, else text or
    # prompt/completion records; `client_agent.preflight` refuses the other kind before Join.
    preference_data: ClassVar[bool] = False

    def __init__(self, settings: ParadigmSettings) -> None:
        self.settings = settings

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def elementwise(self) -> bool:
        """The exchanged vector is plain parameters of the model, each element exchanged as it is (this class's
        own δ, adopt and checkpoint): a site of several ranks may then diff, encode and checkpoint it slice by
        slice (`client_agent.sync.route`). The settings declare it (`ParadigmSettings.elementwise`)."""
        return self.settings.elementwise

    def bind_ps(self, ps) -> None:  # noqa: B027 - optional hook
        """The joined `PSClient`: a paradigm with a service of its own (fsl-sage's trainer) authenticates
        there with the client's PS session. Nothing by default."""

    # ---- building -------------------------------------------------------------------------------

    def build(self, fed: FederationConfig, *, initialise: bool) -> nn.Module:
        """The model before `prepare`: initialised when this client seeds Θ0 or the frozen part is needed."""
        transformers_model = self.settings.transformers_model
        if initialise or not self.shell_ok:
            return build_model(fed.model, transformers_model=transformers_model)
        return build_model_shell(fed.model, transformers_model=transformers_model)

    def prepare(self, model: nn.Module) -> nn.Module:
        """Reparametrise (e.g. inject adapters) and freeze what is not trained; step 3's ϕ := ϕ(θ)."""
        for name, param in model.named_parameters():
            param.requires_grad_(self.trainable(name, param))
        if not any(True for _ in self.exchanged_parameters(model)):
            raise ParadigmError(f"paradigm {self.name!r} exchanges no parameter of this model")
        return model

    # ---- what is trained and exchanged --------------------------------------------------------------

    def exchanged(self, name: str, param: nn.Parameter) -> bool:
        """True for the parameters that travel to and from the PS (the manifest)."""
        return True

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        """True for the parameters the inner optimizer updates; private ones are trainable, not exchanged."""
        return self.exchanged(name, param)

    def exchanged_parameters(self, model: nn.Module):
        return ((n, p) for n, p in model.named_parameters() if self.exchanged(n, p))

    def manifest(self, model: nn.Module) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, shape, dtype) of the exchanged vector, in flat order."""
        return flat_manifest(model, self.exchanged)

    def frozen_buffers(self, name: str) -> bool:
        """True for the buffers the paradigm draws itself and every client must hold alike (none by default)."""
        return False

    def frozen_digest(self, model: nn.Module) -> str:
        """sha256 of what this client built and neither trains nor exchanges (frozen parameters, the
        paradigm's frozen buffers), compared with the federation's at Join; empty when the PS streams the
        whole model (`shell_ok`: nothing is frozen)."""
        if self.shell_ok:
            return ""
        frozen = [(n, p) for n, p in model.named_parameters() if not self.trainable(n, p) and not self.exchanged(n, p)]
        frozen += [(n, b) for n, b in model.named_buffers() if self.frozen_buffers(n)]
        return tensors_digest(frozen)

    # ---- local work -----------------------------------------------------------------------------------

    def local_update(self, trainer: LocalTrainer, steps: int, deadline: float | None, version: int) -> TrainStats:
        """Algorithm 1's local loop on the adopted global `version`: `steps` backprop steps or until `deadline`."""
        return trainer.train(steps, deadline=deadline)

    def eval_metrics(self, trainer: LocalTrainer) -> dict[str, float]:
        """The paradigm's own held-out metrics, by name, taken with the eval loss and reported to the PS (its
        status page shows them); none by default."""
        return {}

    def payload_numel(self, exchanged_numel: int) -> int:
        """Elements pushed after local work: δ is as long as the exchanged vector (zo: one per seed)."""
        return exchanged_numel

    def checkpoint_flat(self, payload: torch.Tensor, base: np.ndarray) -> torch.Tensor:
        """The exchanged vector the client checkpoint keeps (a re-seed after total PS loss): base + δ."""
        return payload + torch.from_numpy(base)

    def downlink_decoders(self) -> dict[str, DownlinkDecoder]:
        """Decoders of the paradigm's own downlink encodings (`Strategy.downlink`), by encoding name.

        Each turns (the vector the client holds, the transfer's bytes, its base version, its version) into
        the new exchanged vector; the PS's sha256 of that vector is checked afterwards, so a decoder that
        is not bit-exact costs a whole-vector transfer, never a wrong model. None by default.
        """
        return {}

    # ---- the exchange -------------------------------------------------------------------------------

    def adopt(self, ranks: Ranks, model: nn.Module, downlink: np.ndarray | None) -> None:
        """Apply what the PS streamed (the global ϕ) to the local model on every rank."""
        ranks.load_global(model, downlink, self.exchanged)

    def delta(self, ranks: Ranks, out: torch.Tensor | None, model: nn.Module,
              base: np.ndarray | None) -> torch.Tensor | None:
        """What is sent after local work: δ = ϕ_local − ϕ_base on rank 0 (Algorithm 1: δc = ϕc − ϕ)."""
        return ranks.delta(out, model, base, self.exchanged)

    def full_exchanged(self, ranks: Ranks, model: nn.Module) -> torch.Tensor | None:
        """The exchanged vector on rank 0 (the master's Θ0 upload; a re-seed after total PS loss)."""
        return ranks.full_flat(model, self.exchanged)

    def export(self, model: nn.Module) -> nn.Module:
        """The model a user takes away (e.g. adapters merged into the base); the model itself by default."""
        return model

    # ---- private state (survives preemption, never leaves the client) ---------------------------------

    def private_names(self, model: nn.Module) -> list[str]:
        return [n for n, p in model.named_parameters() if self.trainable(n, p) and not self.exchanged(n, p)]

    @torch.no_grad()
    def private_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Trained parameters that are not exchanged, copied to CPU for the client checkpoint."""
        params = dict(model.named_parameters())
        return {n: params[n].detach().to("cpu", copy=True) for n in self.private_names(model)}

    @torch.no_grad()
    def load_private_state(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Restore `private_state` after a relaunch; a missing or misshapen entry is an error, not a reset."""
        params = dict(model.named_parameters())
        for name in self.private_names(model):
            if name not in state:
                raise ParadigmError(f"checkpoint lacks the private parameter {name!r} of paradigm {self.name!r}")
            if tuple(state[name].shape) != tuple(params[name].shape):
                raise ParadigmError(f"private parameter {name!r}: checkpoint shape {tuple(state[name].shape)} "
                                    f"!= model shape {tuple(params[name].shape)}")
            params[name].copy_(state[name])
