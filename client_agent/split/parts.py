"""FSL-SAGE's model pieces, shared by the client paradigm and the server-side trainer (paper §III-C3d).

A GPT-2 model is cut after block `cut`: the client keeps the embeddings, blocks [0, cut), the final
norm and the (tied) LM head, with an `AuxBlock` where the server-side blocks were; the server-side
trainer keeps blocks [cut, n_layer) as a `ServerPart`. Activations cross the cut as [B, T, n_embd]
hidden states ("smashed data"); tokens and labels never do.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from geofed.codec import CodecError
from geofed.codec.framed import pack, unpack
from geofed.config import ModelConfig

from ..training.model import build_model


class AuxBlock(nn.Module):
    """h + W2·gelu(W1·LN(h)): a small residual MLP standing in for the server-side blocks.

    Starts as the identity (W2 = 0), so before the first alignment a client trains as if the server
    blocks did nothing.
    """

    def __init__(self, n_embd: int, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, width)
        self.proj = nn.Linear(width, n_embd)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:  # GPT2Block's call
        return hidden_states + self.proj(F.gelu(self.fc(self.ln(hidden_states))))


def aux_prefix(cut: int) -> str:
    """Parameter-name prefix of the auxiliary block inside the client model."""
    return f"transformer.h.{cut}."


def client_model(full: nn.Module, cut: int, aux_width: int, seed: int = 0) -> nn.Module:
    """`full` with blocks [cut, n) replaced by one `AuxBlock` (in place; returns it)."""
    blocks = full.transformer.h
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        aux = AuxBlock(full.config.n_embd, aux_width)
    full.transformer.h = nn.ModuleList([*blocks[:cut], aux])
    return full


class ServerPart(nn.Module):
    """Blocks [cut, n) of the seeded model: maps cut activations to the final norm's input."""

    def __init__(self, cfg: ModelConfig, cut: int) -> None:
        super().__init__()
        full = build_model(cfg)
        self.blocks = nn.ModuleList(full.transformer.h[cut:])
        self.cut = cut
        self._gpt2 = full.transformer  # for the causal mask and block call conventions only
        self._gpt2.h = self.blocks

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Run the blocks on `hidden` [B, T, C] with the causal mask GPT-2 uses."""
        t = self._gpt2
        wpe, ln_f = t.wpe, t.ln_f
        try:  # GPT2Model adds position embeddings and ends with ln_f: neither belongs to the server part
            t.wpe, t.ln_f = _Zero(hidden.shape[-1]), nn.Identity()
            return t(inputs_embeds=hidden, use_cache=False).last_hidden_state
        finally:
            t.wpe, t.ln_f = wpe, ln_f

    def block_state(self) -> dict[str, torch.Tensor]:
        """The blocks' tensors named as in the full model (transformer.h.<cut + i>.…)."""
        out = {}
        for i, block in enumerate(self.blocks):
            for name, value in block.state_dict().items():
                out[f"transformer.h.{self.cut + i}.{name}"] = value
        return out

    def load_block_state(self, state: dict[str, torch.Tensor]) -> None:
        for i, block in enumerate(self.blocks):
            prefix = f"transformer.h.{self.cut + i}."
            block.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


class _Zero(nn.Module):
    """Position 'embeddings' of zeros (the server part receives hidden states that already hold them)."""

    def __init__(self, n_embd: int) -> None:
        super().__init__()
        self.n_embd = n_embd

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*position_ids.shape, self.n_embd)


def full_model(cfg: ModelConfig, client_state: dict[str, torch.Tensor], server: dict[str, torch.Tensor],
               cut: int) -> nn.Module:
    """The whole model a user takes away: the federated client part plus the trainer's server blocks."""
    model = build_model(cfg)
    own = {k: v for k, v in client_state.items() if not k.startswith(aux_prefix(cut))}
    missing = set(model.state_dict()) - set(own) - set(server)
    model.load_state_dict({**own, **server}, strict=False)
    if any(not k.endswith(("attn.bias", "attn.masked_bias", "lm_head.weight")) for k in missing):
        raise ValueError(f"split parts leave model tensors unset: {sorted(missing)[:4]}")
    return model


# ---- tensors on the wire: the delta codec's bytes, length-prefixed header ---------------------------

def encode_tensor(t: torch.Tensor, codec: str) -> tuple[bytes, list[int]]:
    return pack(t.detach().float().cpu().numpy(), codec), list(t.shape)


def decode_tensor(data: bytes, shape: list[int], max_numel: int) -> torch.Tensor:
    numel = int(np.prod(shape)) if shape else 1
    if numel > max_numel:
        raise ValueError(f"tensor of {numel} elements is over the {max_numel} allowed")
    try:
        return torch.from_numpy(unpack(data, numel)).reshape(shape)
    except CodecError as exc:
        raise ValueError(str(exc)) from exc


def training_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of what training keeps: parameters, their gradients, the optimizer's state tensors."""
    params = {id(p): p for p in model.parameters()}.values()
    total = sum(p.numel() * p.element_size() for p in params)
    total += sum(p.numel() * p.element_size() for p in params if p.requires_grad)  # grads (set on backward)
    if optimizer is not None:
        for state in optimizer.state.values():
            total += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v) and v.dim())
    return total
