"""A tokenizer's identity: the same for two copies of one tokenizer, another for other ids or another EOS."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from client_agent.data.tokenizer import ByteTokenizer, TokenizerError, check_identity, load_tokenizer
from geofed.tokenizer_identity import BYTE_SHA256, tokenizer_sha256
from geofed_testing.user_model import make_bpe_tokenizer

TEXTS = ["def add(a, b):\n    return a + b\n" * 50, "The quick brown fox jumps over the lazy dog. " * 80]


def _word_tokenizer(directory: Path, words: list[str], eos: str = "<eos>") -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, "<other>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token=eos).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> Path:
    return make_bpe_tokenizer(tmp_path_factory.mktemp("bpe"), vocab_size=400, texts=TEXTS)


def test_two_copies_of_one_tokenizer_have_one_identity(bpe, tmp_path):
    copy = Path(shutil.copytree(bpe, tmp_path / "elsewhere"))

    assert tokenizer_sha256(str(bpe)) == tokenizer_sha256(str(copy))
    assert load_tokenizer(copy).sha256 == tokenizer_sha256(str(bpe))  # the client's and the PS's agree


def test_other_merges_vocabulary_or_eos_give_another_identity(bpe, tmp_path):
    retrained = make_bpe_tokenizer(tmp_path / "retrained", vocab_size=400, texts=TEXTS[:1])  # other merges
    words = _word_tokenizer(tmp_path / "words", ["alpha", "beta"])
    more_words = _word_tokenizer(tmp_path / "more", ["alpha", "beta", "gamma"])
    other_eos = _word_tokenizer(tmp_path / "eos", ["alpha", "beta"], eos="<other>")

    digests = {tokenizer_sha256(str(p)) for p in (bpe, retrained, words, more_words, other_eos)}

    assert len(digests) == 5
    assert BYTE_SHA256 not in digests


def test_the_byte_tokenizer_has_a_fixed_identity():
    assert ByteTokenizer().sha256 == BYTE_SHA256 == tokenizer_sha256("byte")
    assert load_tokenizer("byte").sha256 == BYTE_SHA256
    assert len(BYTE_SHA256) == 64


def test_a_tokenizer_other_than_the_federations_is_refused_naming_both(bpe):
    mine = ByteTokenizer()
    theirs = tokenizer_sha256(str(bpe))

    with pytest.raises(TokenizerError) as refused:
        check_identity(mine, str(bpe), theirs, given=False)

    message = str(refused.value)
    assert f"'byte' (sha256 {BYTE_SHA256})" in message
    assert f"{str(bpe)!r} (sha256 {theirs})" in message
    assert "--tokenizer DIR" in message and f"{str(bpe)!r} is a directory here" in message
    check_identity(load_tokenizer(bpe), str(bpe), theirs)  # the same tokenizer passes
    check_identity(mine, "", "")  # a federation whose tokenizer is not known yet: the PS decides at Join


def test_an_unreadable_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(OSError, match="is not a directory"):
        tokenizer_sha256(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot load tokenizer from"):
        tokenizer_sha256(str(tmp_path / "empty"))


def test_geofed_tokenizer_id_prints_the_identity_a_federation_pins(bpe, tmp_path):
    geofed = str(Path(sys.executable).with_name("geofed"))

    printed = subprocess.run([geofed, "tokenizer-id", str(bpe)], capture_output=True, text=True, timeout=120)
    byte = subprocess.run([geofed, "tokenizer-id", "byte"], capture_output=True, text=True, timeout=120)
    missing = subprocess.run([geofed, "tokenizer-id", str(tmp_path / "nowhere")], capture_output=True, text=True,
                             timeout=120)

    assert printed.returncode == 0 and printed.stdout == tokenizer_sha256(str(bpe)) + "\n", printed.stderr
    assert byte.stdout == BYTE_SHA256 + "\n"
    assert missing.returncode == 2 and missing.stderr.startswith("geofed tokenizer-id: tokenizer path ")
    assert "Traceback" not in missing.stderr


def test_a_tokenizer_retrained_at_the_same_path_retokenises_the_cached_data(tmp_path):
    from client_agent.data.files import load_data

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("alpha beta alpha beta " * 40)
    _word_tokenizer(tmp_path / "tok", ["alpha", "beta"])
    first, _ = load_data(tmp_path / "data", load_tokenizer(tmp_path / "tok"), cache=tmp_path / "tokens.npy")
    first = np.array(first)
    shutil.rmtree(tmp_path / "tok")
    _word_tokenizer(tmp_path / "tok", ["beta", "alpha"])  # the same name and size, other ids

    second, _ = load_data(tmp_path / "data", load_tokenizer(tmp_path / "tok"), cache=tmp_path / "tokens.npy")

    assert first[:4].tolist() == [3, 4, 3, 4]
    assert np.array(second)[:4].tolist() == [4, 3, 4, 3]
