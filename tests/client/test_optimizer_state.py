"""A single-process client restores AdamW's state without torch.distributed.checkpoint's warm-up step (issue 14).

The reference is torch's own `set_optimizer_state_dict` on an identical model: both restores must leave
the same moments and steps, and the next training step must move the parameters identically.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

from client_agent.training.fsdp import full_optimizer_state
from client_agent.training.model import build_model, lm_loss
from client_agent.training.optimizer_state import OptimizerStateMismatch, load_named_optimizer_state
from client_agent.training.trainer import _param_groups
from geofed.config import ModelConfig

CFG = ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=16)  # GPT-2: tied embedding and head


def _model_and_opt() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = build_model(CFG)
    return model, torch.optim.AdamW(_param_groups(model, 0.1), lr=1e-2, betas=(0.9, 0.95))


def _step(model, opt, seed: int) -> None:
    batch = torch.randint(0, CFG.vocab_size, (2, CFG.block_size + 1), generator=torch.Generator().manual_seed(seed))
    opt.zero_grad()
    lm_loss(model, batch).backward()
    opt.step()


def _trained_state() -> tuple[dict, dict]:
    model, opt = _model_and_opt()
    for seed in range(3):
        _step(model, opt, seed)
    return full_optimizer_state(model, opt), {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_the_restored_state_and_the_next_step_match_torchs_own_restore():
    # Prepare
    saved, weights = _trained_state()
    restored = []
    for load in (set_optimizer_state_dict, load_named_optimizer_state):
        model, opt = _model_and_opt()
        model.load_state_dict(weights)
        load(model, opt, copy.deepcopy(saved))  # a restore may keep the saved tensors: give each its own
        restored.append((model, opt))
    (ref_model, ref_opt), (model, opt) = restored

    # Assert: the same moments and steps, parameter by parameter
    for ref_p, p in zip(ref_model.parameters(), model.parameters(), strict=True):
        ref_s, s = ref_opt.state[ref_p], opt.state[p]
        assert set(ref_s) == set(s) == {"step", "exp_avg", "exp_avg_sq"}
        for key in s:
            assert torch.equal(ref_s[key], s[key]), key
    assert [g["weight_decay"] for g in opt.param_groups] == [g["weight_decay"] for g in ref_opt.param_groups]

    # Execute: one more step from each
    _step(ref_model, ref_opt, 99)
    _step(model, opt, 99)

    # Assert
    for ref_p, p in zip(ref_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(ref_p, p)


def test_a_state_saved_for_other_parameters_is_refused_with_the_reason():
    saved, _ = _trained_state()
    saved["param_groups"][0]["params"] = ["no.such.weight", *saved["param_groups"][0]["params"][1:]]
    model, opt = _model_and_opt()

    with pytest.raises(OptimizerStateMismatch, match="parameter names differ"):
        load_named_optimizer_state(model, opt, saved)


def test_a_state_with_another_number_of_groups_is_refused():
    saved, _ = _trained_state()
    saved["param_groups"] = saved["param_groups"][:1]
    model, opt = _model_and_opt()

    with pytest.raises(OptimizerStateMismatch, match="1 parameter groups, this one 2"):
        load_named_optimizer_state(model, opt, saved)
