"""FSL-SAGE (federated split learning with auxiliary gradient estimation; paper §III-C3d).

The model is cut after block `cut_layer`. Clients train the client-side part (embeddings, the first
`cut_layer` blocks, the final norm and the tied LM head: a U-shaped split, so neither raw tokens nor
labels leave a client) plus a small auxiliary model standing in for the server-side blocks. The
client-side part is federated by the ordinary aggregation; the auxiliary model is private. A separate
server-side trainer (`geofed split-trainer`, its own process: the PS stays torch-free) trains the
server-side blocks on smashed activations clients send every `align_every` rounds and realigns each
client's auxiliary model to the server-side blocks it stands in for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .base import ParadigmSettings


class FslSageSettings(ParadigmSettings):
    """Split learning: clients hold the first blocks and the head, a server-side trainer the rest."""

    name: Literal["fsl-sage"] = Field("fsl-sage", description="FSL-SAGE: federated split learning.")
    client_half: ClassVar[str] = "client_agent.paradigms.fsl_sage:FslSage"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.fsl_sage:FslSage"}
    needs_trainer: ClassVar[bool] = True
    cut_layer: int = Field(
        1, ge=1, le=127, description="Blocks on the client side; the remaining n_layer - cut_layer run on the "
        "server-side trainer. Must leave at least one block on each side."
    )
    aux_width: int = Field(
        32, ge=1, le=65536, description="Hidden width of the auxiliary model (a residual MLP on the cut "
        "activations) that estimates what the server-side blocks do."
    )
    trainer: str = Field(
        "", max_length=253, description="host:port of the server-side trainer clients exchange activations with; "
        "empty: no exchange (clients train with their auxiliary model alone)."
    )
    align_every: int = Field(1, ge=1, le=1_000_000, description="Rounds between two exchanges with the trainer.")
    align_batches: int = Field(
        0, ge=0, le=64,
        description="Batches of smashed activations sent per exchange (each of training.batch_size): 0 sends every "
        "batch the client trained on since the last exchange (the last 64 at most), so the server-side blocks "
        "learn from all of the client's training; n > 0 sends n fresh batches instead.",
    )
    align_steps: int = Field(
        20, ge=1, le=10_000, description="Optimizer steps the trainer spends realigning a client's auxiliary model."
    )
    server_lr: float = Field(1e-3, gt=0, le=1, description="AdamW learning rate of the server-side blocks.")
    codec: Literal["fp32", "bf16", "int8", "int16"] = Field(
        "int16", description="Compression of the activations, gradients and auxiliary weights exchanged."
    )

    def check_model(self, model: Any) -> None:
        if model.family != "gpt2":
            raise ValueError(f"paradigm fsl-sage splits gpt2 models only, not {model.family!r}")
        if not 1 <= self.cut_layer < model.n_layer:
            raise ValueError(
                f"paradigm.cut_layer {self.cut_layer} is outside the model: it must leave at least one of the "
                f"model's {model.n_layer} blocks on each side (1 to {model.n_layer - 1})"
            )
