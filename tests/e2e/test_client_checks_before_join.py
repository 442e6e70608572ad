"""A site whose tokenizer, data or device does not fit the federation is refused with one readable line before
it joins, over a real `geofed ps`: the one-time token is not spent, and the corrected relaunch joins with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from geofed_apps.launch import write_token
from geofed_testing.procs import PSNode

GEOFED = str(Path(sys.executable).with_name("geofed"))
FED = {  # vocab_size 256: the built-in byte tokenizer's 257 ids do not fit
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 256},
    "training": {"batch_size": 4, "local_steps": 2, "sync_interval_s": 60, "eval_every": 100, "precision": "fp32"},
    "codec": {"name": "int8"},
}
WORDS = " ".join(f"w{i % 190 + 1}" for i in range(20000))


def _hf_tokenizer(directory: Path, size: int) -> Path:
    """A local word-level Hugging Face tokenizer of `size` ids (EOS last)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{f"w{i}": i for i in range(1, size - 1)}, "<eos>": size - 1}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="<eos>").save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    ps = PSNode(root / "ps", FED).start()
    (root / "data").mkdir()
    (root / "data" / "a.txt").write_text(WORDS)
    (root / "short").mkdir()
    (root / "short" / "a.txt").write_text("w1 w2 w3 w4 w5")  # 5 tokens: fewer than one window of 33
    (root / "schema").mkdir()
    (root / "schema" / "a.jsonl").write_text('{"text": "w1 w2"}\n{"title": "w3"}\n')  # line 2: no known schema
    _hf_tokenizer(root / "tok", 200)
    try:
        yield ps, root
    finally:
        ps.kill()


def _client(ps: PSNode, root: Path, client_id: str, *extra: str) -> subprocess.CompletedProcess:
    flags = {"--data": str(root / "data"), "--tokenizer": str(root / "tok"), "--device": "cpu"}
    for i in range(0, len(extra), 2):
        flags[extra[i]] = extra[i + 1]
    args = [a for k, v in flags.items() if v is not None for a in (k, v)]
    return subprocess.run(
        [GEOFED, "client", "--ps", ps.address, "--client-id", client_id, "--token-file", str(root / client_id),
         "--work-dir", str(root / "work" / client_id), "--insecure", *args],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("case", "bad", "expected"),
    [
        ("byte-tokenizer", ("--tokenizer", None), ["tokenizer 'byte' has 257 ids (EOS 256)", "embeds 256"]),
        ("unknown-record", ("--data", "{root}/schema"), ["a.jsonl:2: a record with keys ['title'] matches no schema"]),
        ("eval-data", ("--eval-data", "{root}/schema"), ["a.jsonl:2: a record with keys ['title'] matches no schema"]),
        pytest.param(
            "short-data",
            ("--data", "{root}/short"),
            ["6 tokens are too few to hold out 33 for evaluation"],
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "missing-device",
            ("--device", "cuda:99"),
            ["device 'cuda:99' requested but this machine has"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_bad_input_is_refused_before_join_and_the_token_still_joins(site, case, bad, expected):
    # Arrange
    ps, root = site
    client_id = f"t.{case}"
    with ps.admin() as admin:
        write_token(root / client_id, admin.create_token(client_id, master=True)[0])
    flag, value = bad

    # Act
    refused = _client(ps, root, client_id, flag, value.format(root=root) if value else None)
    joins_after_refusal = ps.logs().count(f"event=join client={client_id} ")
    relaunch = _client(ps, root, client_id, "--max-rounds", "1")

    # Assert
    assert refused.returncode == 2, refused.stderr[-3000:]
    last = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr and last.startswith("geofed client: "), refused.stderr[-3000:]
    assert all(part in last for part in expected), last
    assert joins_after_refusal == 0
    assert relaunch.returncode == 0, relaunch.stderr[-3000:]
    assert f"event=joined client={client_id} via=one-time" in relaunch.stderr
    assert ps.logs().count(f"event=join client={client_id} ") == 1
