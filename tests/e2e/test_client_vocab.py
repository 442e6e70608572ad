"""A tokenizer with more ids than the federation's model embeds is refused with one readable line, and the
site's one-time token is not wasted by it (issue 17)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from geofed_apps.launch import write_token
from geofed_testing.procs import PSNode

GEOFED = str(Path(sys.executable).with_name("geofed"))
FED = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},  # vocab_size 257: the byte tokenizer's
    "training": {"batch_size": 4, "local_steps": 2, "sync_interval_s": 60, "eval_every": 100, "precision": "fp32"},
    "codec": {"name": "int8"},
}


def _hf_tokenizer(directory: Path, size: int) -> Path:
    """A local word-level Hugging Face tokenizer of `size` ids (EOS last)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{f"w{i}": i for i in range(1, size - 1)}, "<eos>": size - 1}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="<eos>").save_pretrained(directory)
    return directory


def _client(ps: PSNode, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GEOFED, "client", "--ps", ps.address, "--client-id", "t.v0", "--token-file", str(tmp_path / "token"),
         "--data", str(tmp_path / "data"), "--work-dir", str(tmp_path / "work"), "--insecure", "--device", "cpu",
         *extra],
        capture_output=True, text=True, timeout=180,
    )


def test_vocabulary_mismatch_is_refused_and_the_token_is_not_wasted(tmp_path):
    ps = PSNode(tmp_path / "ps", FED).start()
    try:
        with ps.admin() as admin:
            write_token(tmp_path / "token", admin.create_token("t.v0", master=True)[0])
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "a.txt").write_text(" ".join(f"w{i % 290 + 1}" for i in range(20000)))
        wrong = str(_hf_tokenizer(tmp_path / "tok", 300))

        # Execute 1: a first start learns the model's vocabulary at Join, and stops right there.
        first = _client(ps, tmp_path, "--tokenizer", wrong)
        joins = ps.logs().count("event=join client=t.v0")
        # Execute 2: a relaunch with the same tokenizer stops before it even joins.
        second = _client(ps, tmp_path, "--tokenizer", wrong)
        # Execute 3: with the right tokenizer the same (spent) one-time token file is enough to go on.
        third = _client(ps, tmp_path, "--max-rounds", "1")

        # Assert
        for out in (first, second):
            assert out.returncode == 2, out.stderr[-3000:]
            last = out.stderr.strip().splitlines()[-1]
            assert "Traceback" not in out.stderr and "300 ids" in last and "embeds 257" in last, last
        assert joins == 1 and ps.logs().count("event=join client=t.v0") == 2  # the relaunch did not join
        assert third.returncode == 0, third.stderr[-3000:]
        assert ps.status()["version"] == 2  # Θ0 and one delta: the site went on training
    finally:
        ps.kill()
