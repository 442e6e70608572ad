"""Building the client model: both families from config, from a local directory, and bad configs."""

from __future__ import annotations

import math

import pytest
import torch

from client_agent.training.model import ModelConfigError, build_model, count_parameters, lm_loss
from geofed.config import ModelConfig

TINY = dict(n_layer=2, n_head=4, n_embd=64, block_size=64)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_build_from_config_is_seeded_and_sized(family):
    """Same seed, same weights; another seed, other weights; the shapes follow the config."""
    cfg = ModelConfig(family=family, seed=7, **TINY)

    a, b = build_model(cfg), build_model(cfg)
    c = build_model(cfg.model_copy(update={"seed": 8}))

    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters(), strict=True))
    assert a.get_input_embeddings().weight.shape == (257, 64)
    assert a.config.num_hidden_layers == 2
    assert all(p.dtype == torch.float32 for p in a.parameters())
    # Tied input/output embeddings are one parameter, counted once.
    assert a.get_output_embeddings().weight is a.get_input_embeddings().weight
    assert count_parameters(a) == sum(p.numel() for p in a.parameters())


def test_build_does_not_disturb_caller_rng():
    """Building a model seeds a private RNG stream, not the caller's."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model(ModelConfig(**TINY))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_lm_loss_at_init_is_near_uniform(family):
    """A freshly initialised model predicts roughly uniformly: loss ≈ ln(vocab)."""
    model = build_model(ModelConfig(family=family, **TINY))
    batch = torch.randint(0, 257, (2, 65), generator=torch.Generator().manual_seed(0))

    loss = lm_loss(model, batch)

    assert loss.shape == ()
    assert abs(loss.item() - math.log(257)) < 0.5


def test_lm_loss_rejects_bad_batch_shape():
    model = build_model(ModelConfig(**TINY))
    with pytest.raises(ValueError, match=r"\[B, T\+1\]"):
        lm_loss(model, torch.zeros(5, dtype=torch.long))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_load_from_saved_local_directory(tmp_path, family):
    """`path` loads a saved model (fp32, no downloads) with the very same weights (a GPT-2 built from
    config is `client_agent.training.gpt2`'s, saved as and loaded into transformers' model)."""
    original = build_model(ModelConfig(family=family, seed=3, **TINY))
    original.save_pretrained(tmp_path)

    loaded = build_model(ModelConfig(family=family, path=str(tmp_path), **TINY))

    assert type(loaded).__module__.startswith("transformers.")
    for (name, p), (loaded_name, q) in zip(original.named_parameters(), loaded.named_parameters(), strict=True):
        assert loaded_name == name
        assert q.dtype == torch.float32, name
        assert torch.equal(p, q), name


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        # model_construct skips the settings validator, so the builder's own check is exercised too
        (ModelConfig.model_construct(**{**ModelConfig().model_dump(), "n_head": 3, "n_embd": 64}),
         "divisible by n_head"),
        (ModelConfig(family="llama", n_head=8, n_embd=24), "even head dimension"),
        (ModelConfig(path="/nonexistent/model/dir"), "is not a directory"),
    ],
)
def test_bad_config_is_one_readable_line(cfg, match):
    with pytest.raises(ModelConfigError, match=match) as info:
        build_model(cfg)
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_directory_without_model_is_rejected(tmp_path):
    with pytest.raises(ModelConfigError, match="no config.json"):
        build_model(ModelConfig(path=str(tmp_path)))


def test_directory_with_broken_weights_is_rejected(tmp_path):
    build_model(ModelConfig(**TINY)).save_pretrained(tmp_path)
    for weights in tmp_path.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    with pytest.raises(ModelConfigError, match="cannot load model") as info:
        build_model(ModelConfig(path=str(tmp_path), **TINY))
    assert "\n" not in str(info.value)


def test_block_size_beyond_loaded_context_is_rejected(tmp_path):
    build_model(ModelConfig(**TINY)).save_pretrained(tmp_path)
    with pytest.raises(ModelConfigError, match="exceeds the loaded model's context 64"):
        build_model(ModelConfig(path=str(tmp_path), n_layer=2, n_head=4, n_embd=64, block_size=128))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_model_shell_matches_built_model_once_weights_are_loaded(family):
    from client_agent.training.flat import flatten, load_flat_, manifest
    from client_agent.training.model import build_model_shell

    cfg = ModelConfig(family=family)
    full, shell = build_model(cfg), build_model_shell(cfg)
    assert manifest(full) == manifest(shell)
    load_flat_(shell, flatten(full))
    batch = torch.randint(0, cfg.vocab_size, (2, 33))
    assert lm_loss(shell, batch).item() == pytest.approx(lm_loss(full, batch).item(), abs=1e-6)
    assert shell.lm_head.weight is shell.get_input_embeddings().weight  # ties survive


def test_settings_refuse_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match=r"n_embd \(64\) must be divisible by n_head \(3\)"):
        ModelConfig(n_head=3, n_embd=64)
