"""LoRA's wrapped layers default to the architecture's, as peft picks them: a Llama model gets q_proj and v_proj,
a GPT-2 model c_attn; a set `paradigm.target_modules` still wins, and a name the model lacks is still refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from client_agent.paradigms import client_paradigm
from geofed.config import FederationConfig
from geofed.paradigms.lora import DEFAULT_TARGETS
from geofed_apps.finetune.preset import preset_settings
from geofed_testing.user_model import make_llama_checkpoint

LLAMA = {"family": "llama", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return make_llama_checkpoint(tmp_path_factory.mktemp("llama"), vocab_size=257, eos_id=256, n_layer=1, n_embd=32,
                                 n_head=2, block_size=64)


def _wrapped(fed: FederationConfig) -> set[str]:
    """The last name components of the layers LoRA wrapped."""
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    return {n.split(".lora_A.")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if ".lora_A." in n}


def test_the_family_defaults_are_pefts():
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    assert {family: list(targets) for family, targets in DEFAULT_TARGETS.items()} == {
        family: list(PEFT_TARGETS[family]) for family in DEFAULT_TARGETS}


@pytest.mark.parametrize("name", ["lora", "hybrid-lora"])
def test_a_llama_model_gets_q_proj_and_v_proj_by_default(name):
    fed = FederationConfig.model_validate({"model": LLAMA, "paradigm": {"name": name, "rank": 4}})
    assert _wrapped(fed) == {"q_proj", "v_proj"}


def test_a_llama_checkpoint_gets_its_architectures_defaults_under_the_lora_preset(llama_dir, tmp_path):
    settings = preset_settings("lora", tmp_path / "unused-base")
    settings["model"] = {**LLAMA, "path": str(llama_dir), "block_size": 64}

    fed = FederationConfig.model_validate(settings)

    assert fed.paradigm.target_modules is None
    assert _wrapped(fed) == {"q_proj", "v_proj"}


def test_a_set_target_modules_wins_and_a_name_the_model_lacks_is_refused():
    fed = FederationConfig.model_validate({"model": LLAMA,
                                           "paradigm": {"name": "lora", "rank": 4, "target_modules": ["o_proj"]}})
    assert _wrapped(fed) == {"o_proj"}
    with pytest.raises(ValidationError, match="paradigm.target_modules: c_attn is not a layer of a llama model"):
        FederationConfig.model_validate({"model": LLAMA,
                                         "paradigm": {"name": "lora", "rank": 4, "target_modules": ["c_attn"]}})


def test_a_gpt2_model_gets_c_attn_by_default():
    fed = FederationConfig.model_validate({"model": {**LLAMA, "family": "gpt2"},
                                           "paradigm": {"name": "lora", "rank": 4}})
    assert _wrapped(fed) == {"c_attn"}


def test_the_built_in_base_keeps_the_layers_its_benchmarks_measured_and_another_model_does_not(llama_dir, tmp_path):
    from geofed_apps.finetune.preset import BASE_TARGETS, with_base_targets

    base = str(tmp_path / "base")
    on_base = with_base_targets(preset_settings("lora", base), base)
    assert on_base["paradigm"]["target_modules"] == BASE_TARGETS == ["c_attn", "c_proj", "c_fc"]

    elsewhere = preset_settings("lora", base)
    elsewhere["model"] = {**LLAMA, "path": str(llama_dir), "block_size": 64}
    assert "target_modules" not in with_base_targets(elsewhere, base)["paradigm"]

    stated = preset_settings("lora", base)
    stated["paradigm"]["target_modules"] = ["c_attn"]
    assert with_base_targets(stated, base)["paradigm"]["target_modules"] == ["c_attn"]
