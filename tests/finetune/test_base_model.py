"""The fine-tuning base model is pinned by its recipe: the same steps and seed give the same bytes in any
process, another seed other bytes, and a cached copy that no longer holds its recorded bytes is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from client_agent.data.corpus import stdlib_root
from geofed.config import ModelConfig
from geofed_apps.finetune.base_model import BaseModelError, BaseRecipe, content_hash, describe, ensure_base_model

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 64}
FILES = [stdlib_root() / "json" / "decoder.py", stdlib_root() / "json" / "encoder.py"]

_PRETRAIN = """
import sys
from pathlib import Path
from geofed_apps.finetune.base_model import BaseRecipe, ensure_base_model
recipe = BaseRecipe(steps=3, seed=int(sys.argv[2]), batch_size=4, warmup_steps=1, model={model})  # as _recipe
files = [Path(p) for p in sys.argv[3:]]
print(ensure_base_model(Path(sys.argv[1]), recipe, files=files, say=lambda m: None).name)
"""


def _recipe(seed: int) -> BaseRecipe:
    return BaseRecipe(steps=3, seed=seed, batch_size=4, warmup_steps=1, model=TINY)


def _pretrain_in_a_new_process(cache: Path, seed: int) -> str:
    code = _PRETRAIN.format(model=TINY)
    out = subprocess.run(
        [sys.executable, "-c", code, str(cache), str(seed), *map(str, FILES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _recorded(cache: Path, name: str) -> str:
    return json.loads((cache / name / "base.json").read_text())["sha256"]


def test_same_steps_and_seed_give_the_same_content_hash_in_two_processes_and_another_seed_another(tmp_path):
    here = ensure_base_model(tmp_path / "a", _recipe(seed=0), files=FILES, say=lambda m: None).name
    there = _pretrain_in_a_new_process(tmp_path / "b", seed=0)
    other = ensure_base_model(tmp_path / "c", _recipe(seed=1), files=FILES, say=lambda m: None).name

    assert here == there  # base-<recipe key>-<content hash>: same recipe, same bytes
    assert _recorded(tmp_path / "a", here) == _recorded(tmp_path / "b", there)
    assert other.split("-")[1] != here.split("-")[1]  # the seed is part of the recipe key
    assert _recorded(tmp_path / "c", other) != _recorded(tmp_path / "a", here)  # and changes the bytes


def test_the_content_hash_is_of_the_weights_and_the_name_ends_with_it(tmp_path):
    recipe = BaseRecipe(steps=2, seed=0, batch_size=4, warmup_steps=1, model=TINY)
    path = ensure_base_model(tmp_path, recipe, files=FILES, say=lambda m: None)
    from client_agent.training.model import build_model

    model = build_model(ModelConfig.model_validate({**TINY, "path": str(path)}))
    digest = content_hash(model)
    assert path.name == f"base-{recipe.key()}-{digest[:12]}" and _recorded(tmp_path, path.name) == digest
    assert ensure_base_model(tmp_path, recipe, files=[], say=lambda m: None) == path  # cached: not retrained
    assert f"sha256 {digest} (1x32, 2 steps, seed 0;" in describe(
        ModelConfig.model_validate({**TINY, "path": str(path)})
    )
    with torch.no_grad():
        model.transformer.wte.weight[0, 0] += 1e-3
    assert content_hash(model) != digest


def test_a_cached_base_whose_weights_changed_is_refused_by_name(tmp_path):
    recipe = BaseRecipe(steps=2, seed=0, batch_size=4, warmup_steps=1, model=TINY)
    path = ensure_base_model(tmp_path, recipe, files=FILES, say=lambda m: None)
    from client_agent.training.model import build_model

    cfg = ModelConfig.model_validate({**TINY, "path": str(path)})
    model = build_model(cfg)
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.bias.add_(0.5)
    model.save_pretrained(path)  # the weights change, base.json still records the pretrained ones

    with pytest.raises(BaseModelError, match=r"has content hash [0-9a-f]{12}, but .*base.json records"):
        describe(cfg)


def test_a_recipe_with_no_steps_is_refused(tmp_path):
    with pytest.raises(BaseModelError, match="at least 1 pretraining step"):
        ensure_base_model(tmp_path, BaseRecipe(steps=0, model=TINY), files=FILES, say=lambda m: None)


def test_the_recipe_flags_name_the_default_recipe_or_another_shape():
    import argparse

    from geofed_apps.finetune.base_model import BASE_MODEL, add_recipe_flags, recipe_from

    parser = argparse.ArgumentParser()
    add_recipe_flags(parser, "base-")
    assert recipe_from(parser.parse_args([]), "base-") == BaseRecipe()
    larger = recipe_from(parser.parse_args(["--base-layers", "4", "--base-heads", "8", "--base-embd", "256"]), "base-")
    assert larger.model == {**BASE_MODEL, "n_layer": 4, "n_head": 8, "n_embd": 256}
    assert larger.key() != BaseRecipe().key()  # another cache entry: the default base is never replaced
