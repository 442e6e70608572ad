"""`client_agent.training.gpt2` against transformers' GPT2LMHeadModel: the same state dict, θ0, logits, loss
and gradients.

The reference is transformers' model built from a transformers config written out here, not through
`client_agent.training.model`, so a mistake in the native model's config mapping shows as a difference too.
"""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config as HFConfig
from transformers import GPT2LMHeadModel as HFModel

from client_agent.paradigms import client_paradigm
from client_agent.training.flat import flatten, manifest
from client_agent.training.gpt2 import GPT2LMHeadModel
from client_agent.training.model import build_model, build_model_shell, lm_loss
from geofed.config import FederationConfig, ModelConfig

CONFIGS = {
    "default": ModelConfig(),
    "deeper-narrow": ModelConfig(n_layer=3, n_head=2, n_embd=48, vocab_size=50, block_size=16, seed=5),
    "one-head": ModelConfig(n_layer=1, n_head=1, n_embd=16, vocab_size=300, block_size=8, seed=2),
    "dropout": ModelConfig(n_layer=2, n_head=4, n_embd=32, block_size=16, dropout=0.1, seed=3),
}


def reference(cfg: ModelConfig) -> HFModel:
    """transformers' GPT-2 for `cfg`, initialised by transformers from `cfg.seed`."""
    special = cfg.vocab_size - 1
    config = HFConfig(
        n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd, vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout,
        bos_token_id=special, eos_token_id=special, use_cache=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return HFModel(config).float()


def batch(cfg: ModelConfig, rows: int = 3) -> torch.Tensor:
    """Token ids [rows, block_size + 1]: inputs and targets of full context windows."""
    return torch.randint(0, cfg.vocab_size, (rows, cfg.block_size + 1), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_names_order_and_shapes_are_transformers(name):
    cfg = CONFIGS[name]
    native, hf = build_model(cfg), reference(cfg)

    assert isinstance(native, GPT2LMHeadModel)
    assert [(k, tuple(v.shape)) for k, v in native.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in hf.state_dict().items()
    ]
    assert [n for n, _ in native.named_parameters()] == [n for n, _ in hf.named_parameters()]
    assert native.lm_head.weight is native.transformer.wte.weight
    assert manifest(native) == manifest(hf)
    # Conv1D weights are stored (in, out): c_attn maps C to 3C.
    assert native.transformer.h[0].attn.c_attn.weight.shape == (cfg.n_embd, 3 * cfg.n_embd)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_same_seed_draws_the_same_initial_weights_as_transformers(name):
    cfg = CONFIGS[name]
    native, hf = build_model(cfg), reference(cfg)

    assert torch.equal(flatten(native), flatten(hf))
    assert torch.equal(flatten(build_model(cfg, transformers_model=True)), flatten(native))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_loss_and_gradients_agree_on_one_state_dict(name):
    cfg = CONFIGS[name]
    hf = reference(cfg.model_copy(update={"seed": cfg.seed + 100}))
    with torch.no_grad():  # a trained-looking state: LayerNorms and biases away from their init
        for p in hf.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    native = build_model(cfg)
    native.load_state_dict(hf.state_dict(), strict=True)
    assert native.lm_head.weight is native.transformer.wte.weight
    # Dropout draws differ between the implementations; without it (eval) the computation is the same.
    training = cfg.dropout == 0
    native.train(training)
    hf.train(training)
    tokens = batch(cfg)

    native_logits = native(input_ids=tokens[:, :-1], use_cache=False).logits
    hf_logits = hf(input_ids=tokens[:, :-1], use_cache=False).logits
    torch.testing.assert_close(native_logits, hf_logits, atol=1e-5, rtol=1e-5)

    native_loss, hf_loss = lm_loss(native, tokens), lm_loss(hf, tokens)
    torch.testing.assert_close(native_loss, hf_loss, atol=1e-5, rtol=1e-5)
    native_loss.backward()
    hf_loss.backward()
    hf_grads = dict(hf.named_parameters())
    for pname, p in native.named_parameters():
        assert p.grad is not None, pname
        torch.testing.assert_close(p.grad, hf_grads[pname].grad, atol=1e-5, rtol=1e-4, msg=pname)


def test_dropout_is_applied_in_training_and_not_in_eval():
    cfg = CONFIGS["dropout"]
    model = build_model(cfg)
    ids = batch(cfg)[:, :-1]
    model.train()
    torch.manual_seed(0)
    first = model(input_ids=ids).logits
    second = model(input_ids=ids).logits
    assert not torch.allclose(first, second)
    model.eval()
    assert torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_shorter_sequence_is_causal_and_a_longer_one_is_refused():
    cfg = CONFIGS["deeper-narrow"]
    model = build_model(cfg).eval()
    ids = batch(cfg)[:, : cfg.block_size]
    whole = model(input_ids=ids).logits
    prefix = model(input_ids=ids[:, :5]).logits
    torch.testing.assert_close(prefix, whole[:, :5], atol=1e-5, rtol=1e-5)  # no position sees a later one
    with pytest.raises(ValueError, match="longer than the model's context"):
        model(input_ids=batch(cfg)[:, : cfg.block_size + 1])


def test_the_shell_has_the_layout_and_takes_the_weights():
    cfg = CONFIGS["default"]
    full, shell = build_model(cfg), build_model_shell(cfg)
    assert isinstance(shell, GPT2LMHeadModel)
    assert not any(p.is_meta for p in shell.parameters())
    assert shell.lm_head.weight is shell.transformer.wte.weight
    assert manifest(shell) == manifest(full)
    shell.load_state_dict(full.state_dict())
    tokens = batch(cfg)
    assert lm_loss(shell, tokens).item() == lm_loss(full, tokens).item()


@pytest.mark.parametrize(("paradigm", "native"), [("pretrain", True), ("bitfit", True), ("lora", False)])
def test_the_paradigms_settings_decide_whether_transformers_builds_the_model(paradigm, native):
    fed = FederationConfig.model_validate({"model": {"n_layer": 1, "n_embd": 32}, "paradigm": {"name": paradigm}})
    model = client_paradigm(fed.paradigm).build(fed, initialise=True)
    assert isinstance(model, GPT2LMHeadModel) is native
    assert fed.paradigm.transformers_model is not native


def test_a_saved_native_model_loads_as_transformers_model_with_the_same_logits(tmp_path):
    cfg = CONFIGS["deeper-narrow"]
    native = build_model(cfg).eval()
    native.save_pretrained(tmp_path)
    loaded = build_model(cfg.model_copy(update={"path": str(tmp_path)})).eval()
    assert isinstance(loaded, HFModel)
    ids = batch(cfg)[:, :-1]
    torch.testing.assert_close(loaded(input_ids=ids).logits, native(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
