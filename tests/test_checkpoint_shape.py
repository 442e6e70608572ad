"""The model's shape comes from `model.path`'s config.json: unstated settings are filled, stated ones that
contradict it are refused naming both, and a PS without the checkpoint keeps the settings as they are."""

from __future__ import annotations

import json

import pytest

from geofed.checkpoint_shape import CheckpointShapeError, fill_checkpoint_shape
from geofed.config import FederationConfig

LLAMA = {"model_type": "llama", "num_hidden_layers": 3, "num_attention_heads": 4, "hidden_size": 192,
         "vocab_size": 2000, "max_position_embeddings": 256}
GPT2 = {"model_type": "gpt2", "n_layer": 5, "n_head": 2, "n_embd": 64, "vocab_size": 50257, "n_positions": 1024}


def _fed(tmp_path, config: dict, **model) -> dict:
    """Settings data naming the checkpoint at `tmp_path` (written with `config`), before validation."""
    (tmp_path / "config.json").write_text(json.dumps(config))
    return {"model": {"path": str(tmp_path), **model}}


def with_checkpoint_shape(data: dict) -> FederationConfig:
    return FederationConfig.model_validate(fill_checkpoint_shape(data))


@pytest.mark.parametrize(
    ("config", "expected"),
    [(LLAMA, ("llama", 3, 4, 192, 2000, 256)), (GPT2, ("gpt2", 5, 2, 64, 50257, 1024))],
)
def test_unstated_settings_are_read_from_the_checkpoint(tmp_path, config, expected):
    fed = with_checkpoint_shape(_fed(tmp_path, config))

    m = fed.model
    assert (m.family, m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.block_size) == expected


def test_a_stated_value_the_checkpoint_contradicts_is_refused_naming_both(tmp_path):
    fed = _fed(tmp_path, LLAMA, vocab_size=257, n_layer=3)

    with pytest.raises(CheckpointShapeError) as refused:
        with_checkpoint_shape(fed)

    message = str(refused.value)
    assert "model.vocab_size 257 is stated but the checkpoint's config.json has vocab_size 2000" in message
    assert "n_layer" not in message  # stated and agreeing
    assert str(tmp_path) in message


def test_a_shorter_stated_context_is_kept_and_a_longer_one_refused(tmp_path):
    kept = with_checkpoint_shape(_fed(tmp_path, LLAMA, block_size=64))

    assert (kept.model.block_size, kept.model.n_layer) == (64, 3)
    with pytest.raises(CheckpointShapeError, match="model.block_size 512 is stated but .* max_position_embeddings 256"):
        with_checkpoint_shape(_fed(tmp_path, LLAMA, block_size=512))


def test_settings_stay_as_they_are_without_the_checkpoint_here(tmp_path):
    data = {"model": {"path": str(tmp_path / "on-the-clients"), "n_layer": 7}}

    assert fill_checkpoint_shape(data) is data


def test_an_unreadable_config_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointShapeError, match="cannot read .*config.json"):
        fill_checkpoint_shape({"model": {"path": str(tmp_path)}})


def test_a_paradigms_layer_names_are_checked_against_the_checkpoints_family(tmp_path):
    """LoRA layers named for a Llama checkpoint whose family the settings leave unstated are the checkpoint's,
    not the default family's (gpt2)."""
    data = _fed(tmp_path, LLAMA)
    data["paradigm"] = {"name": "lora", "rank": 4, "target_modules": ["q_proj", "o_proj", "down_proj"]}

    fed = with_checkpoint_shape(data)

    assert (fed.model.family, fed.paradigm.target_modules) == ("llama", ["q_proj", "o_proj", "down_proj"])
