"""Model <-> flat fp32 vector: manifest order, round trips, deltas, and the `select` seam."""

from __future__ import annotations

import pytest
import torch

from client_agent.training.flat import (
    ManifestMismatch,
    check_manifest,
    delta_,
    flat_numel,
    flatten,
    load_flat_,
    manifest,
    requires_grad,
)
from client_agent.training.model import build_model
from geofed.config import ModelConfig

CFG = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=64)


@pytest.fixture(scope="module")
def model():
    return build_model(CFG)


def test_manifest_follows_named_parameters_and_skips_tied(model):
    entries = manifest(model)

    names = [t.name for t in entries]
    assert names == [name for name, _ in model.named_parameters()]
    assert "lm_head.weight" not in names  # tied to transformer.wte.weight, exchanged once
    assert (entries[0].name, entries[0].shape, entries[0].dtype) == ("transformer.wte.weight", (257, 64), "float32")
    assert flat_numel(model) == sum(p.numel() for p in model.parameters())


def test_flatten_load_round_trip(model):
    flat = flatten(model)
    assert flat.dtype == torch.float32 and flat.dim() == 1 and flat.device.type == "cpu"

    other = build_model(CFG.model_copy(update={"seed": 99}))
    assert not torch.equal(flatten(other), flat)
    load_flat_(other, flat)

    assert torch.equal(flatten(other), flat)
    assert torch.equal(other.lm_head.weight, flat[: 257 * 64].view(257, 64))  # tie survives


def test_load_casts_to_parameter_dtype(model):
    flat = flatten(model)
    half = build_model(CFG).to(torch.bfloat16)

    load_flat_(half, flat)

    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    assert torch.allclose(flatten(half), flat, rtol=1e-2, atol=1e-3)


def test_delta_is_local_minus_base_into_given_buffer(model):
    base = flatten(model)
    local = build_model(CFG)
    with torch.no_grad():
        for i, p in enumerate(local.parameters()):
            p.add_(0.01 * (i + 1))
    out = torch.full_like(base, float("nan"))

    result = delta_(out, local, base)

    assert result is out
    assert torch.allclose(out, flatten(local) - base)
    assert torch.allclose(base + out, flatten(local))


@pytest.mark.parametrize("size_off", [-1, 1])
def test_wrong_sizes_are_rejected(model, size_off):
    n = flat_numel(model) + size_off
    with pytest.raises(ValueError, match="1-D tensor of"):
        load_flat_(model, torch.zeros(n))
    with pytest.raises(ValueError, match="flat_out"):
        delta_(torch.zeros(n), model, flatten(model))


def test_select_exchanges_a_subset(model):
    """The seam for fine-tuning paradigms: only selected parameters are flattened and loaded."""
    only_ln = lambda name, p: ".ln_" in name  # noqa: E731
    flat = flatten(model, only_ln)
    assert flat.numel() == sum(p.numel() for n, p in model.named_parameters() if ".ln_" in n)

    other = build_model(CFG.model_copy(update={"seed": 5}))
    wte_before = other.transformer.wte.weight.clone()
    load_flat_(other, flat, only_ln)

    assert torch.equal(flatten(other, only_ln), flat)
    assert torch.equal(other.transformer.wte.weight, wte_before)  # unselected: untouched


def test_requires_grad_select_skips_frozen(model):
    frozen = build_model(CFG)
    frozen.transformer.wte.weight.requires_grad_(False)
    assert [t.name for t in manifest(frozen, requires_grad)][0] == "transformer.wpe.weight"


def test_check_manifest(model):
    expected = [[t.name, list(t.shape), t.dtype] for t in manifest(model)]  # as JSON gives it
    check_manifest(model, expected)

    llama = build_model(CFG.model_copy(update={"family": "llama"}))
    with pytest.raises(ManifestMismatch, match="tensor #0 is model.embed_tokens.weight"):
        check_manifest(llama, expected)
    with pytest.raises(ManifestMismatch, match="exchanged tensors here, .* in the federation"):
        check_manifest(model, expected[:-1])
