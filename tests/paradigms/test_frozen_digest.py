"""The frozen digest a client declares at Join: over what it builds and never trains nor exchanges."""

from __future__ import annotations

import hashlib

import torch

from client_agent.paradigms import client_paradigm
from geofed.config import FederationConfig

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}


def _digest(paradigm: dict, model: dict | None = None, change=None) -> str:
    fed = FederationConfig.model_validate({"model": {**TINY, **(model or {})}, "paradigm": paradigm})
    client = client_paradigm(fed.paradigm)
    built = client.prepare(client.build(fed, initialise=True))
    if change is not None:
        with torch.no_grad():
            change(built)
    return client.frozen_digest(built)


def _scale(model, match: str) -> None:
    for name, p in model.named_parameters():
        if match in name:
            p.mul_(2.0)


LORA = {"name": "lora", "rank": 4, "target_modules": ["c_attn"]}
RAVAN = {"name": "ravan", "rank": 4, "heads": 2, "target_modules": ["c_attn"]}


def test_lora_digest_covers_the_frozen_base_and_not_the_adapters():
    base = _digest(LORA)
    assert base == _digest(LORA)  # two builds of one federation agree
    assert base == _digest(LORA, change=lambda m: _scale(m, "lora_A"))  # exchanged: not part of it
    assert base != _digest(LORA, change=lambda m: _scale(m, "wte"))  # a frozen weight is
    assert base != _digest(LORA, model={"seed": 1})  # another seeded init: another base


def test_ravan_digest_covers_the_projections_and_not_the_heads_or_scalings():
    base = _digest(RAVAN)
    assert base == _digest(RAVAN, change=lambda m: _scale(m, "ravan_"))  # H and s: trained, not frozen
    assert base != _digest({**RAVAN, "seed": 3})  # other projections, the same base weights

    def move_projection(model) -> None:
        buffer = next(b for n, b in model.named_buffers() if n.endswith("ravan_A"))
        buffer[0, 0, 0] += 1.0

    assert base != _digest(RAVAN, change=move_projection)


def test_the_digest_is_sha256_over_names_dtypes_shapes_and_bytes_of_the_frozen_tensors():
    fed = FederationConfig.model_validate({"model": TINY, "paradigm": LORA})
    client = client_paradigm(fed.paradigm)
    model = client.prepare(client.build(fed, initialise=True))
    expected = hashlib.sha256()
    for name, p in model.named_parameters():
        if not p.requires_grad:
            t = p.detach().contiguous()
            expected.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
            expected.update(t.numpy().tobytes())
    assert client.frozen_digest(model) == expected.hexdigest()


def test_a_paradigm_whose_whole_model_is_streamed_declares_no_digest():
    assert _digest({"name": "pretrain"}) == ""
