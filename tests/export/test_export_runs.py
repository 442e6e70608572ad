"""`geofed export` and `geofed local`'s `final_model/` on the checkpoints of short real federations.

Each run is `geofed local` as a user starts it (real PS and client processes); the export is the `geofed`
command in a subprocess, loaded back with transformers and peft as a user would.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from client_agent.data.tokenizer import ByteTokenizer
from client_agent.training.flat import load_flat_
from client_agent.training.model import build_model
from geofed.config import FederationConfig
from geofed_apps.shards import newest_sharded
from geofed_testing.local_run import GEOFED, LocalRun, run_local
from ps_server.checkpoint import CheckpointStore

TEXT = "def grüße(名前):\n    return f'héllo {名前} 🙂'\n"

pytestmark = pytest.mark.long


def export(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([GEOFED, "export", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def federation(run: Path) -> FederationConfig:
    return FederationConfig.model_validate(yaml.safe_load((run / "federation.yaml").read_text()))


def logits(model, text: str = TEXT) -> torch.Tensor:
    ids = torch.as_tensor(ByteTokenizer().encode(text).astype("int64"))[None]
    with torch.no_grad():
        return model(input_ids=ids).logits


def trained(run: LocalRun) -> Path:
    """The run directory, once its PS holds a version made of the clients' training steps (Θ0 is version 1)."""
    assert run.run_dir is not None, run.stdout
    assert CheckpointStore(run.run_dir / "ps").load_latest().version >= 2, run.stdout
    records = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("step", 0) for r in records) > 0, "the clients took no training step: CPUs too busy?"
    return run.run_dir


@pytest.fixture(scope="module")
def pretrain_run(tmp_path_factory) -> Path:
    return trained(run_local(tmp_path_factory.mktemp("pretrain"), "--clients", "2", "--duration", "12"))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    return trained(run_local(tmp_path_factory.mktemp("lora"), "--clients", "2", "--duration", "20",
                             "--set", "paradigm.name=lora"))


def test_export_of_a_pretraining_checkpoint_loads_with_transformers_and_gives_the_clients_logits(
        pretrain_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt_file = CheckpointStore(pretrain_run / "ps").files()[0]
    out = export("--checkpoint", str(ckpt_file), "--federation", str(pretrain_run / "federation.yaml"),
                 "--out", str(tmp_path / "model"))

    ckpt = CheckpointStore.load(ckpt_file)
    assert f"global v{ckpt.version} of a pretrain federation" in out.stdout
    client_model = load_flat_(build_model(federation(pretrain_run).model), torch.as_tensor(ckpt.flat)).eval()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    torch.testing.assert_close(logits(exported), logits(client_model), atol=1e-5, rtol=1e-5)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert tokenizer.encode(TEXT) == ByteTokenizer().encode(TEXT).tolist()
    assert tokenizer.eos_token_id == ByteTokenizer.eos_id
    assert tokenizer.decode(tokenizer.encode(TEXT)) == TEXT


def test_local_final_model_is_the_export_of_the_last_checkpoint_with_its_tokenizer(pretrain_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    export("--checkpoint", str(pretrain_run), "--out", str(tmp_path / "model"))  # the run dir: newest, its settings

    final = AutoModelForCausalLM.from_pretrained(pretrain_run / "final_model").eval()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    torch.testing.assert_close(logits(final), logits(exported), atol=0, rtol=0)
    tokenizer = AutoTokenizer.from_pretrained(pretrain_run / "final_model")
    assert tokenizer.encode(TEXT) == ByteTokenizer().encode(TEXT).tolist()
    generated = final.generate(torch.tensor([tokenizer.encode("def ")]), max_new_tokens=8, do_sample=False)
    assert generated.shape == (1, 4 + 8)


def test_lora_export_loads_with_peft_and_equals_the_merged_model(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = export("--checkpoint", str(lora_run / "ps"), "--out", str(tmp_path / "model"))
    assert "adapter:" in out.stdout

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "model" / "base").eval()
    plain = logits(base)
    adapted = PeftModel.from_pretrained(base, tmp_path / "model" / "adapter").eval()
    torch.testing.assert_close(logits(adapted), logits(merged), atol=1e-5, rtol=1e-5)
    # The adapters were trained (peft starts B at zero, when merged and base are bit-identical).
    from safetensors.torch import load_file

    lora_b = [t for n, t in load_file(tmp_path / "model" / "adapter" / "adapter_model.safetensors").items()
              if "lora_B" in n]
    assert lora_b and any(t.abs().max() > 0 for t in lora_b)
    assert not torch.equal(plain, logits(merged))
    # The base is the seeded init every client built.
    fed = federation(lora_run)
    reference = build_model(fed.model, transformers_model=True).eval()
    torch.testing.assert_close(plain, logits(reference), atol=0, rtol=0)
    # geofed local's final_model carries the same adapters.
    local = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(lora_run / "final_model" / "base"),
                                      lora_run / "final_model" / "adapter").eval()
    torch.testing.assert_close(logits(local), logits(adapted), atol=0, rtol=0)


def test_a_sharded_ps_checkpoint_exports_from_the_run_directory(tmp_path):
    from transformers import AutoModelForCausalLM

    run = run_local(tmp_path / "runs", "--clients", "2", "--duration", "12", "--ps-shards", "2").run_dir
    shard_dirs = sorted(run.rglob("shard-*/ckpt"))
    assert len(shard_dirs) == 2, list(run.rglob("*"))
    export("--checkpoint", str(run), "--out", str(tmp_path / "model"))

    ckpt = newest_sharded(shard_dirs)
    client_model = load_flat_(build_model(federation(run).model), torch.as_tensor(ckpt.flat)).eval()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    torch.testing.assert_close(logits(exported), logits(client_model), atol=1e-5, rtol=1e-5)
    # One shard's file alone is a slice: refused, naming the shard.
    one = subprocess.run([GEOFED, "export", "--checkpoint", str(CheckpointStore(shard_dirs[1]).files()[0]),
                          "--out", str(tmp_path / "slice")], capture_output=True, text=True, timeout=300)
    assert one.returncode == 2
    assert "is PS shard 1's slice" in one.stderr and "pass the directory holding every shard" in one.stderr
    assert not (tmp_path / "slice").exists()
