"""Training settings reach the trainer and the model; one set of defaults; clear refusals and help texts."""

from __future__ import annotations

import argparse

import pytest
import torch
from pydantic import ValidationError

from client_agent.data.streams import TokenStream
from client_agent.data.tokenizer import ByteTokenizer
from client_agent.training.model import build_model
from client_agent.training.trainer import LocalTrainer
from geofed.cli_flags import add_model_flags
from geofed.config import ClientConfig, FederationConfig, ModelConfig, ServerConfig, TrainingConfig
from geofed_apps.local import LOCAL_DEFAULTS

MODEL = ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, seed=1)
TEXT = "settings reach the trainer. " * 200


def _trainer(model_cfg: ModelConfig = MODEL, **train) -> LocalTrainer:
    cfg = TrainingConfig(**{"batch_size": 4, "precision": "fp32", "warmup_steps": 0, **train})
    stream = TokenStream(ByteTokenizer().encode(TEXT), model_cfg.block_size, seed=0, eval_fraction=cfg.eval_fraction)
    return LocalTrainer(build_model(model_cfg), cfg, stream, "cpu", micro_batch_size=4)


def test_adamw_betas_weight_decay_groups_and_clip_come_from_the_settings():
    t = _trainer(adam_beta1=0.8, adam_beta2=0.99, weight_decay=0.1, weight_decay_groups="all", grad_clip=0.5)

    groups = t.optimizer.param_groups
    assert [g["betas"] for g in groups] == [(0.8, 0.99)]
    assert [g["weight_decay"] for g in groups] == [0.1]  # "all": one group, biases and norms decayed too
    matrices = _trainer(weight_decay=0.1).optimizer.param_groups
    assert [g["weight_decay"] for g in matrices] == [0.1, 0.0]
    assert all(p.dim() < 2 for p in matrices[1]["params"])


@pytest.mark.parametrize(("clip", "clipped"), [(1e-6, True), (0.0, False)])
def test_grad_clip_bounds_the_step_and_zero_disables_it(clip, clipped, monkeypatch):
    seen = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        seen.append(max_norm)
        return real(params, max_norm, *a, **k)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    t = _trainer(grad_clip=clip)
    t.train(1, deadline=float("inf"))
    assert seen and (seen[0] == clip if clipped else seen[0] == float("inf"))


def test_reset_optimizer_forgets_the_moments():
    t = _trainer()
    t.train(2, deadline=float("inf"))
    assert len(t.optimizer.state) > 0

    t.reset_optimizer()

    assert len(t.optimizer.state) == 0


def test_dropout_reaches_the_built_model():
    model = build_model(MODEL.model_copy(update={"dropout": 0.2}))
    rates = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert rates == {0.2}


def test_eval_hold_out_follows_eval_fraction():
    tokens = ByteTokenizer().encode(TEXT)
    small, large = (TokenStream(tokens, 16, eval_fraction=f) for f in (0.05, 0.25))
    assert large.eval_tokens.size > 4 * small.eval_tokens.size * 0.9
    assert small.tokens.size + small.eval_tokens.size == len(tokens)


def test_geofed_local_runs_the_same_defaults_as_geofed_ps():
    assert FederationConfig.model_validate(LOCAL_DEFAULTS) == FederationConfig(name="local")


@pytest.mark.parametrize(("section", "field", "value"), [
    ("training", "adam_beta2", 1.0), ("training", "grad_clip", -1.0), ("training", "eval_fraction", 0.0),
    ("training", "torch_threads", -2), ("model", "dropout", 1.0), ("downlink", "history", 0),
])
def test_a_setting_outside_its_range_is_refused_with_its_name(section, field, value):
    with pytest.raises(ValidationError, match=field):
        FederationConfig.model_validate({section: {field: value}})


@pytest.mark.parametrize("model", [ClientConfig, ServerConfig, TrainingConfig, ModelConfig])
def test_help_texts_name_defaults_and_required_flags_never_pydantic_internals(model):
    parser = argparse.ArgumentParser()
    add_model_flags(parser, model)
    text = parser.format_help()
    assert "Undefined" not in text
    if model is ClientConfig:
        assert "(required)" in text
