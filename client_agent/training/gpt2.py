"""GPT-2 as a causal language model in plain torch, without transformers.

The modules, their parameter names, their order and their shapes are those of transformers'
`GPT2LMHeadModel` (Conv1D weights stored (in, out), the LM head tied to the token embedding), so the
state dict, the flat vector and the PS manifest are the same whichever implementation built the model, and
a state dict loads into either. The forward pass is the same computation: pre-norm blocks, causal
scaled-dot-product attention, tanh-approximated GELU, a final LayerNorm and the tied head.

`GPT2LMHeadModel(config)` draws its initial weights in the order transformers draws them for the same
configuration (`_draw_initial_weights`), so one seed gives the same θ0 with either implementation. Built
under `torch.device("meta")` it allocates and draws nothing (the shell of a client whose weights come from
the PS).

Shape names in the comments: B batch, T sequence length, C `n_embd`, H `n_head`, D = C / H, V `vocab_size`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPT2Config:
    """The shape and regularisation of the model; attribute names as in transformers' `GPT2Config`."""

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    dropout: float = 0.0  # embeddings, attention probabilities and both residual branches
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    model_type = "gpt2"
    use_cache = False

    @property
    def hidden_size(self) -> int:
        return self.n_embd

    @property
    def num_hidden_layers(self) -> int:
        return self.n_layer

    @property
    def num_attention_heads(self) -> int:
        return self.n_head

    @property
    def max_position_embeddings(self) -> int:
        return self.n_positions

    def to_transformers(self) -> Any:
        """The equivalent `transformers.GPT2Config` (imports transformers)."""
        from transformers import GPT2Config as HFConfig

        return HFConfig(
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            vocab_size=self.vocab_size,
            n_positions=self.n_positions,
            resid_pdrop=self.dropout,
            embd_pdrop=self.dropout,
            attn_pdrop=self.dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            use_cache=False,
        )


@dataclass
class ModelOutput:
    """The base model's output: `last_hidden_state` (B, T, C), after the final LayerNorm."""

    last_hidden_state: torch.Tensor


@dataclass
class CausalLMOutput:
    """The language model's output: `logits` (B, T, V)."""

    logits: torch.Tensor


class Conv1D(nn.Module):
    """A linear layer whose weight is stored (in, out), as GPT-2's checkpoints and transformers store it."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.nx, self.nf = n_in, n_out
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x (..., in) -> (..., out): bias + x @ weight
        out = torch.addmm(self.bias, x.reshape(-1, self.nx), self.weight)
        return out.view(*x.shape[:-1], self.nf)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t attends to positions 0..t."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.c_attn = Conv1D(config.n_embd, 3 * config.n_embd)  # q, k, v side by side
        self.c_proj = Conv1D(config.n_embd, config.n_embd)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # (B, T, C)
        q, k, v = self.c_attn(x).split(c, dim=2)  # 3 × (B, T, C)
        # (B, T, C) -> (B, H, T, D)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, T, D), softmax(q kᵀ / √D) v over the causal window
        y = y.transpose(1, 2).reshape(b, t, c)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: C -> 4C, GELU (tanh approximation), 4C -> C."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(config.n_embd, 4 * config.n_embd)
        self.c_proj = Conv1D(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.c_fc(x), approximate="tanh")  # (B, T, 4C)
        return self.dropout(self.c_proj(h))  # (B, T, C)


class Block(nn.Module):
    """One pre-norm transformer block: x + attn(LN(x)), then + mlp(LN(·))."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # (B, T, C)
        return x + self.mlp(self.ln_2(x))  # (B, T, C)


class GPT2Model(nn.Module):
    """Token and position embeddings, the blocks, the final LayerNorm (transformers' `GPT2Model`)."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd, _weight=torch.empty(config.vocab_size, config.n_embd))
        self.wpe = nn.Embedding(
            config.n_positions, config.n_embd, _weight=torch.empty(config.n_positions, config.n_embd)
        )
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
    ) -> ModelOutput:
        """Hidden states for `input_ids` (B, T), or for `inputs_embeds` (B, T, C) given in their place."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)  # (B, T, C)
        t = inputs_embeds.shape[1]
        if t > self.config.n_positions:
            raise ValueError(f"sequence of {t} tokens is longer than the model's context {self.config.n_positions}")
        positions = torch.arange(t, device=inputs_embeds.device)  # (T,)
        x = self.drop(inputs_embeds + self.wpe(positions))  # (B, T, C)
        for block in self.h:
            x = block(x)
        return ModelOutput(last_hidden_state=self.ln_f(x))


class GPT2LMHeadModel(nn.Module):
    """GPT-2 with its language-model head, the head's weight being the token embedding's."""

    # The blocks FSDP shards one by one (`client_agent.training.fsdp`), as transformers' attribute of this name says.
    _no_split_modules = ("Block",)

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False, device="meta")
        self.tie_weights()
        if not self.transformer.wte.weight.is_meta:
            _draw_initial_weights(self)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.transformer.wte

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def tie_weights(self) -> None:
        """Make the head's weight the token embedding's (again, after anything that replaced either)."""
        self.lm_head.weight = self.transformer.wte.weight

    def forward(
        self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
    ) -> CausalLMOutput:
        h = self.transformer(input_ids=input_ids, inputs_embeds=inputs_embeds).last_hidden_state  # (B, T, C)
        return CausalLMOutput(logits=self.lm_head(h))  # (B, T, V)

    def save_pretrained(self, directory: str | Path, **kwargs: Any) -> None:
        """Save as a transformers GPT-2 checkpoint (config.json, safetensors), loadable with `model.path`."""
        to_transformers(self).save_pretrained(directory, **kwargs)


def to_transformers(model: GPT2LMHeadModel) -> nn.Module:
    """transformers' `GPT2LMHeadModel` over the same tensors as `model` (imports transformers)."""
    from transformers import GPT2LMHeadModel as HFModel

    with torch.device("meta"):
        hf = HFModel(model.config.to_transformers())
    hf.load_state_dict(model.state_dict(), assign=True)
    hf.tie_weights()
    hf.train(model.training)
    return hf


@torch.no_grad()
def _draw_initial_weights(model: GPT2LMHeadModel) -> None:
    """θ0 drawn from the global RNG as transformers draws it for `GPT2LMHeadModel.from_config`.

    transformers first builds its modules with their own initialisation (embeddings N(0, 1), Conv1D
    weights N(0, 0.02), biases 0, LayerNorms 1 and 0), then re-initialises every module children-first:
    embeddings and Conv1D weights N(0, 0.02), and after each attention and MLP module's children its
    `c_proj` weight once more with std 0.02/√(2·n_layer). The values kept are the last drawn; the earlier
    draws are repeated here only so the RNG stream, and so θ0 for a seed, are the same.
    """
    std = model.config.initializer_range
    proj_std = std / math.sqrt(2 * model.config.n_layer)
    t = model.transformer

    def reset_norm(norm: nn.LayerNorm) -> None:
        norm.weight.fill_(1.0)
        norm.bias.zero_()

    # The modules' own initialisation, in construction order.
    t.wte.weight.normal_()
    t.wpe.weight.normal_()
    for block in t.h:
        reset_norm(block.ln_1)
        for layer in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            layer.weight.normal_(0.0, 0.02)
            layer.bias.zero_()
        reset_norm(block.ln_2)
    reset_norm(t.ln_f)
    # The re-initialisation, children before their parents.
    t.wte.weight.normal_(0.0, std)
    t.wpe.weight.normal_(0.0, std)
    for block in t.h:
        reset_norm(block.ln_1)
        block.attn.c_attn.weight.normal_(0.0, std)
        block.attn.c_proj.weight.normal_(0.0, std)
        block.attn.c_proj.weight.normal_(0.0, proj_std)
        reset_norm(block.ln_2)
        block.mlp.c_fc.weight.normal_(0.0, std)
        block.mlp.c_proj.weight.normal_(0.0, std)
        block.mlp.c_proj.weight.normal_(0.0, proj_std)
    reset_norm(t.ln_f)
