"""`geofed local` on a user's own Llama checkpoint and BPE tokenizer: every client tokenises with the tokenizer,
the model's shape is the checkpoint's (the banner says so), and a stated shape the checkpoint contradicts is
refused before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from geofed_testing.user_model import make_bpe_tokenizer, make_llama_checkpoint

GEOFED = str(Path(sys.executable).with_name("geofed"))
WORDS = ["federated ", "learning ", "across ", "sites ", "with ", "slow ", "links\n", "tokenizers ", "merge "]


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("user")
    rng = np.random.default_rng(0)
    data = root / "corpus"
    data.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (data / f"{name}.txt").write_text("".join(rng.choice(WORDS, 4000)))
    bpe = make_bpe_tokenizer(root / "bpe", vocab_size=2000)
    llama = make_llama_checkpoint(root / "llama", vocab_size=2000, n_layer=3, n_embd=64, n_head=4, block_size=64)
    return {"data": data, "bpe": bpe, "llama": llama, "root": root}


def _local(user: dict[str, Path], runs: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GEOFED, "local", "--clients", "2", "--duration", "8", "--data", str(user["data"]), "--run-dir", str(runs),
         "--set", f"model.path={user['llama']}", "--set", "model.family=llama", *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.long
def test_local_trains_a_users_llama_on_its_bpe_ids(user, tmp_path):
    out = _local(user, tmp_path / "runs", "--tokenizer", str(user["bpe"]), "--set", "training.batch_size=2")

    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    banner = out.stdout.splitlines()[0]
    assert f"model llama 3x64, vocab 2000, tokenizer {user['bpe']} (checkpoint {user['llama']})" in banner, banner
    run = next((tmp_path / "runs").iterdir())
    settings = yaml.safe_load((run / "federation.yaml").read_text())["model"]
    assert (settings["vocab_size"], settings["n_layer"], settings["n_embd"], settings["block_size"]) == (
        2000, 3, 64, 64)
    for i in range(2):
        tokens = np.load(run / "clients" / f"client-{i}" / "tokens.npy", mmap_mode="r")
        assert int(tokens.max()) > 256  # BPE ids, beyond anything the byte tokenizer gives
    assert "eval loss: " in out.stdout


def test_a_stated_vocab_the_checkpoint_contradicts_is_refused_before_anything_starts(user, tmp_path):
    out = _local(user, tmp_path / "runs", "--set", "model.vocab_size=257")

    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert "model.vocab_size 257 is stated but the checkpoint's config.json has vocab_size 2000" in out.stderr
    assert out.stderr.count("\n") == 1 and out.stdout == ""
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("case", "flags", "expected"),
    [
        ("small-vocab", ("--set", "model.vocab_size=300", "--set", "model.path="),
         "has 2000 ids (EOS 0) but the federation's model embeds 300"),
    ],
)
def test_a_tokenizer_local_cannot_train_with_is_refused_before_anything_starts(user, tmp_path, case, flags, expected):
    out = _local(user, tmp_path / "runs", "--tokenizer", str(user["bpe"]), *flags)

    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stderr.startswith("geofed local: ") and expected in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_the_docstring_preset_with_a_users_tokenizer_is_refused_before_anything_starts(user, tmp_path):
    """Without --data, --paradigm trains the built-in byte-level base on the docstring task: another tokenizer
    has nothing to train there."""
    runs = tmp_path / "runs"
    out = subprocess.run(
        [GEOFED, "local", "--paradigm", "lora", "--tokenizer", str(user["bpe"]), "--run-dir", str(runs)],
        capture_output=True, text=True, timeout=120,
    )

    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stderr.startswith("geofed local: --paradigm without --data fine-tunes the built-in byte-level base")
    assert not runs.exists()
