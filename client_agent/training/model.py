"""The causal language model a client trains, built from `ModelConfig` (paper §III-C2: GPT-2, Llama).

Pretraining starts from a seeded random init, so every client that builds the same config gets the same
θ0 (the master client's is the one pushed to the PS, Fig. 1 step 1). With `cfg.path` a local Hugging
Face checkpoint is loaded instead; nothing is ever downloaded.

GPT-2 built from config is `client_agent.training.gpt2`'s model, which imports no transformers (seconds of start-up)
and has transformers' parameter names, shapes and seeded θ0; `transformers_model=True` builds transformers'
own (for a paradigm whose settings declare `transformers_model`, e.g. peft's adapters). Llama and a
`cfg.path` checkpoint are always transformers models.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from geofed.config import ModelConfig

from ..data.batch import Batch, batch_tokens, next_token_loss
from .gpt2 import GPT2Config, GPT2LMHeadModel

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class ModelConfigError(ValueError):
    """A model config that cannot be built or loaded; the message is one readable line."""


def _llama_intermediate_size(n_embd: int) -> int:
    """Llama's SwiGLU width: 8/3 of the hidden size, rounded up to a multiple of 64 (or 256 when large)."""
    multiple = 256 if n_embd >= 1024 else 64
    width = (8 * n_embd + 2) // 3
    return -(-width // multiple) * multiple


def check_model_config(cfg: ModelConfig) -> None:
    """Reject shapes the transformer cannot have, before any memory is allocated."""
    if cfg.n_embd % cfg.n_head != 0:
        raise ModelConfigError(f"n_embd ({cfg.n_embd}) must be divisible by n_head ({cfg.n_head})")
    if cfg.family == "llama" and (cfg.n_embd // cfg.n_head) % 2 != 0:
        raise ModelConfigError(
            f"llama needs an even head dimension for rotary embeddings, got {cfg.n_embd // cfg.n_head}"
        )


def gpt2_config(cfg: ModelConfig) -> GPT2Config:
    """`client_agent.training.gpt2`'s config for `cfg`: `cfg.dropout` (0 for pretraining), EOS = the last id."""
    check_model_config(cfg)
    if cfg.family != "gpt2":
        raise ModelConfigError(f"model family {cfg.family!r} has no native implementation; only 'gpt2' has")
    special = cfg.vocab_size - 1  # the byte tokenizer's EOS (256 of 257); GPT-2's 50256 of 50257 as well
    return GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        dropout=cfg.dropout,
        bos_token_id=special,
        eos_token_id=special,
    )


def is_native(cfg: ModelConfig, transformers_model: bool = False) -> bool:
    """Whether `build_model(cfg, transformers_model=...)` builds `client_agent.training.gpt2`'s model, not
    transformers'."""
    return cfg.family == "gpt2" and not cfg.path and not transformers_model


def hf_config(cfg: ModelConfig) -> PretrainedConfig:
    """The transformers config for `cfg`: `cfg.dropout` (0 for pretraining), tied embeddings, EOS = the last id."""
    check_model_config(cfg)
    special = cfg.vocab_size - 1  # the byte tokenizer's EOS (256 of 257); GPT-2's 50256 of 50257 as well
    if cfg.family == "gpt2":
        return gpt2_config(cfg).to_transformers()
    if cfg.family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            num_hidden_layers=cfg.n_layer,
            num_attention_heads=cfg.n_head,
            num_key_value_heads=cfg.n_head,
            hidden_size=cfg.n_embd,
            intermediate_size=_llama_intermediate_size(cfg.n_embd),
            vocab_size=cfg.vocab_size,
            max_position_embeddings=cfg.block_size,
            tie_word_embeddings=True,
            attention_dropout=cfg.dropout,
            bos_token_id=special,
            eos_token_id=special,
            pad_token_id=None,
            use_cache=False,
        )
    raise ModelConfigError(f"unknown model family {cfg.family!r}; expected 'gpt2' or 'llama'")


def _context_length(model: nn.Module) -> int | None:
    """Longest sequence the loaded model accepts, if its config says."""
    config = getattr(model, "config", None)
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def check_model_source(cfg: ModelConfig) -> None:
    """What can be checked without building: the shapes, and that a `cfg.path` is a local transformers model."""
    check_model_config(cfg)
    if not cfg.path:
        return
    path = Path(cfg.path).expanduser()
    if not path.is_dir():
        raise ModelConfigError(f"model path {str(path)!r} is not a directory")
    if not (path / "config.json").is_file():
        raise ModelConfigError(f"model path {str(path)!r} has no config.json (not a transformers model)")


def _load_pretrained(cfg: ModelConfig) -> nn.Module:
    """Load a local checkpoint directory in fp32 (the master weights), refusing anything remote."""
    check_model_source(cfg)
    path = Path(cfg.path or "").expanduser()
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    except Exception as exc:  # transformers and safetensors raise many types; report them as one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelConfigError(f"cannot load model from {str(path)!r}: {first}") from exc
    context = _context_length(model)
    if context is not None and context < cfg.block_size:
        raise ModelConfigError(f"block_size {cfg.block_size} exceeds the loaded model's context {context}")
    return model


def build_model(cfg: ModelConfig, *, transformers_model: bool = False) -> nn.Module:
    """Build the model from `cfg`: seeded random init, or `cfg.path` loaded from local files.

    GPT-2 from config is `client_agent.training.gpt2`'s unless `transformers_model`; both draw the same θ0 for a seed.
    """
    if cfg.path:
        return _load_pretrained(cfg)
    if is_native(cfg, transformers_model):
        config = gpt2_config(cfg)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            return GPT2LMHeadModel(config)
    config = hf_config(cfg)
    from transformers import AutoModelForCausalLM

    # Seed a private RNG stream so building a model neither depends on nor disturbs the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.float()


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameter elements (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy of `batch` [B, T+1]: inputs are [:, :-1], targets [:, 1:].

    A `MaskedBatch` (prompt/completion data) averages over its counted targets only (`next_token_loss`).
    """
    tokens = batch_tokens(batch)
    if tokens.dim() != 2 or tokens.shape[1] < 2:
        raise ValueError(f"batch must be [B, T+1] with T >= 1, got shape {tuple(tokens.shape)}")
    logits = model(input_ids=tokens[:, :-1], use_cache=False).logits  # (B, T, V)
    return next_token_loss(logits, batch)


def build_model_shell(cfg: ModelConfig, *, transformers_model: bool = False) -> nn.Module:
    """The model's structure with uninitialised CPU storage, for a client whose weights come from the PS.

    Random initialisation of a large model costs seconds that a rejoining client (§III-B4) would throw
    away. Parameters are created on the meta device and given empty CPU storage; buffers (e.g. rotary
    frequencies) are built for real, since the PS does not send them. Tied embeddings are re-tied.
    """
    if cfg.path:
        return _load_pretrained(cfg)
    if is_native(cfg, transformers_model):
        config = gpt2_config(cfg)
        with torch.device("meta"):
            model = GPT2LMHeadModel(config)  # no storage, nothing drawn; it has no buffers
        model.to_empty(device="cpu")
        model.tie_weights()
        return model
    config = hf_config(cfg)
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config)
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_meta:
                module._parameters[name] = nn.Parameter(
                    torch.empty(param.shape, dtype=torch.float32), requires_grad=param.requires_grad
                )
    model.tie_weights()
    return model.float()
