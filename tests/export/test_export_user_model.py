"""`geofed export` of a user's own Llama and BPE tokenizer (`geofed_testing.user_model`), and what it refuses.

The PS checkpoint is written with the PS's own writer (`CheckpointStore.save`) from the model the client
builds, with its weights changed as training would change them; the export is the `geofed` command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from client_agent.paradigms import client_paradigm
from client_agent.training.flat import flatten, manifest
from geofed.config import FederationConfig
from geofed_testing.local_run import GEOFED
from geofed_testing.user_model import make_bpe_tokenizer, make_llama_checkpoint
from ps_server.checkpoint import CheckpointStore, PSCheckpoint

TEXT = "Permission is hereby granted, free of charge, to any person — grüße"


def write_ps(ps: Path, settings: dict) -> Path:
    """federation.yaml and one checkpoint (version 7) of what the PS would hold: the exchanged vector of the
    model the clients build, changed as training changes it."""
    (ps / "ckpt").mkdir(parents=True)
    (ps / "federation.yaml").write_text(yaml.safe_dump(settings))
    fed = FederationConfig.model_validate(settings)
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    flat = flatten(model, paradigm.exchanged).numpy()
    flat = flat + np.random.default_rng(0).normal(0, 0.01, flat.shape).astype(np.float32)  # "trained"
    CheckpointStore(ps / "ckpt").save(PSCheckpoint(7, flat, tuple(manifest(model, paradigm.exchanged)), {}, {}))
    return ps


@pytest.fixture(scope="module")
def user_files(tmp_path_factory) -> dict:
    """The user's model settings: their Llama checkpoint at model.path and their BPE tokenizer."""
    root = tmp_path_factory.mktemp("user")
    tok = make_bpe_tokenizer(root / "tokenizer", vocab_size=2000)
    llama = make_llama_checkpoint(root / "llama", vocab_size=2000, n_layer=2, n_embd=64, n_head=4, eos_id=0)
    return {"family": "llama", "path": str(llama), "tokenizer": str(tok), "vocab_size": 2000, "block_size": 128,
            "n_embd": 64, "n_head": 4, "n_layer": 2}


@pytest.fixture(scope="module")
def user_ps(user_files, tmp_path_factory) -> Path:
    """A PS work dir of a pretraining federation of the user's model."""
    return write_ps(tmp_path_factory.mktemp("pretrain") / "ps", {"model": user_files})


def geofed_export(*args: str, python_prelude: str | None = None) -> subprocess.CompletedProcess:
    if python_prelude is None:
        cmd = [GEOFED, "export", *args]
    else:
        cmd = [sys.executable, "-c", f"{python_prelude}; import sys; from geofed_apps.cli import main; "
               f"sys.exit(main(['export', *sys.argv[1:]]))", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_llama_export_carries_the_bpe_tokenizer_and_generates(user_ps, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--out", str(tmp_path / "model"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "global v7 of a pretrain federation" in run.stdout

    ours = AutoTokenizer.from_pretrained(tmp_path / "model")
    theirs = AutoTokenizer.from_pretrained(FederationConfig.model_validate(
        yaml.safe_load((user_ps / "federation.yaml").read_text())).model.tokenizer)
    assert len(ours) == len(theirs) == 2000
    assert ours.encode(TEXT) == theirs.encode(TEXT)
    assert ours.eos_token_id == theirs.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    flat = CheckpointStore(user_ps / "ckpt").load_latest().flat
    np.testing.assert_array_equal(model.model.embed_tokens.weight.detach().numpy().reshape(-1),
                                  flat[: model.model.embed_tokens.weight.numel()])
    prompt = ours(TEXT, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**prompt, max_new_tokens=6, do_sample=False, pad_token_id=ours.eos_token_id)
    assert generated.shape[1] == prompt["input_ids"].shape[1] + 6
    assert ours.decode(generated[0, : prompt["input_ids"].shape[1]]) == TEXT


def refused(run: subprocess.CompletedProcess, out: Path, *fragments: str) -> None:
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("geofed export: "), run.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert not out.exists() or not any(out.iterdir())
    assert not out.with_name(f".{out.name}.partial").exists()


def test_a_checkpoint_of_another_model_is_refused_naming_the_first_differing_tensor(user_ps, tmp_path):
    other = tmp_path / "gpt2.yaml"
    other.write_text(yaml.safe_dump({"model": {"family": "gpt2"}}))
    out = tmp_path / "model"
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--federation", str(other), "--out", str(out))
    refused(run, out, "does not fit the federation's model", "tensor #0 is model.embed_tokens.weight [2000, 64] here",
            "but transformer.wte.weight [257, 128] in the federation")


def test_a_missing_base_is_refused(user_ps, tmp_path):
    settings = yaml.safe_load((user_ps / "federation.yaml").read_text())
    settings["model"]["path"] = str(tmp_path / "gone")
    (tmp_path / "fed.yaml").write_text(yaml.safe_dump(settings))
    out = tmp_path / "model"
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--federation", str(tmp_path / "fed.yaml"),
                        "--out", str(out))
    refused(run, out, "cannot build the federation's model", "gone", "is not a directory")


def test_an_environment_without_torch_is_refused(user_ps, tmp_path):
    out = tmp_path / "model"
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--out", str(out),
                        python_prelude="import sys; sys.modules['torch'] = None")
    refused(run, out, "torch", "run it where the client agent is installed")


def test_a_non_empty_out_a_missing_checkpoint_and_missing_settings_are_refused(user_ps, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--out", str(out))
    assert run.returncode == 2 and "exists and is not an empty directory" in run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]

    (tmp_path / "empty").mkdir()
    refused(geofed_export("--checkpoint", str(tmp_path / "empty"), "--out", str(tmp_path / "a")), tmp_path / "a",
            "no PS checkpoint")
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "ps-v000000000007.safetensors").write_bytes(
        next((user_ps / "ckpt").glob("ps-v*.safetensors")).read_bytes())
    refused(geofed_export("--checkpoint", str(loose), "--out", str(tmp_path / "b")), tmp_path / "b",
            "no federation.yaml", "--federation")


def test_a_tokenizer_the_model_cannot_embed_is_refused(user_ps, tmp_path):
    from geofed_testing.user_model import make_bpe_tokenizer as make

    big = make(tmp_path / "big", vocab_size=3000)
    out = tmp_path / "model"
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--out", str(out), "--tokenizer", str(big))
    refused(run, out, "3000 ids", "embeds 2000")


def test_lora_on_a_model_path_writes_adapters_naming_that_base_and_the_merged_model(user_files, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ps = write_ps(tmp_path / "ps", {"model": user_files, "paradigm": {
        "name": "lora", "target_modules": ["q_proj", "v_proj"], "rank": 4}})
    run = geofed_export("--checkpoint", str(ps / "ckpt"), "--out", str(tmp_path / "model"))
    assert run.returncode == 0, run.stderr[-3000:]

    assert not (tmp_path / "model" / "base").exists()  # the base is the user's own checkpoint
    config = json.loads((tmp_path / "model" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(user_files["path"]).resolve())
    ids = torch.tensor([[5, 17, 300, 1999, 42]])
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]),
                                        tmp_path / "model" / "adapter").eval()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    base = AutoModelForCausalLM.from_pretrained(user_files["path"]).eval()
    with torch.no_grad():
        torch.testing.assert_close(adapted(ids).logits, merged(ids).logits, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(base(ids).logits, merged(ids).logits, atol=1e-3)


def test_hybrid_lora_exports_the_shared_base_and_says_the_adapters_stay_at_the_sites(user_files, tmp_path):
    from transformers import AutoModelForCausalLM

    ps = write_ps(tmp_path / "ps", {"model": user_files, "paradigm": {
        "name": "hybrid-lora", "target_modules": ["q_proj"], "rank": 4}})
    run = geofed_export("--checkpoint", str(ps / "ckpt"), "--out", str(tmp_path / "model"))
    assert run.returncode == 0, run.stderr[-3000:]

    assert "adapters are private to each site" in run.stdout
    assert not (tmp_path / "model" / "adapter").exists()
    report = json.loads((tmp_path / "model" / "geofed-export.json").read_text())
    assert report["paradigm"] == "hybrid-lora" and "shared base" in report["note"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    flat = CheckpointStore(ps / "ckpt").load_latest().flat
    embed = model.model.embed_tokens.weight
    np.testing.assert_array_equal(embed.detach().numpy().reshape(-1), flat[: embed.numel()])


def test_a_split_learning_federation_is_refused(user_ps, tmp_path):
    (tmp_path / "fed.yaml").write_text(yaml.safe_dump({"paradigm": {"name": "fsl-sage"}}))
    out = tmp_path / "model"
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--federation", str(tmp_path / "fed.yaml"),
                        "--out", str(out))
    refused(run, out, "paradigm fsl-sage splits the model", "the split trainer the rest")


def test_settings_that_state_only_the_checkpoint_get_its_shape_as_the_ps_does(user_files, user_ps, tmp_path):
    """A settings file naming only model.path and the tokenizer (the user's guide) exports: the shape and the
    vocabulary come from the checkpoint's config.json, as `geofed ps` reads them."""
    plain = tmp_path / "fed.yaml"
    plain.write_text(yaml.safe_dump({"model": {"path": user_files["path"], "tokenizer": user_files["tokenizer"]}}))
    run = geofed_export("--checkpoint", str(user_ps / "ckpt"), "--federation", str(plain), "--out",
                        str(tmp_path / "model"))

    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((tmp_path / "model" / "config.json").read_text())["vocab_size"] == 2000
