"""Tokenizers: the built-in byte tokenizer and a Hugging Face tokenizer from a local directory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client_agent.data.tokenizer import (
    ByteTokenizer,
    Tokenizer,
    TokenizerError,
    check_vocab,
    load_tokenizer,
    token_dtype,
)


def test_byte_tokenizer_round_trip():
    tok = ByteTokenizer()
    text = "def f(x):\n    return x  # π ≈ 3.14 ✓"

    ids = tok.encode(text)

    assert isinstance(tok, Tokenizer)
    assert ids.dtype == np.uint16
    assert ids.tolist() == list(text.encode("utf-8"))
    assert tok.decode(np.append(ids, tok.eos_id)) == text
    assert (tok.vocab_size, tok.eos_id) == (257, 256)


def test_load_tokenizer_none_is_bytes():
    assert isinstance(load_tokenizer(None), ByteTokenizer)


def test_load_local_hf_tokenizer(tmp_path):
    """A tokenizer saved locally loads through AutoTokenizer without network access."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, "hello": 2, "world": 3}
    raw = RawTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    hf = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="<eos>")
    hf.save_pretrained(tmp_path)

    tok = load_tokenizer(tmp_path)

    assert isinstance(tok, Tokenizer)
    assert list(tok.encode("hello world hello")) == [2, 3, 2]
    assert (tok.vocab_size, tok.eos_id) == (4, 1)
    assert tok.name.startswith("hf:")


def test_missing_tokenizer_dir_is_clear(tmp_path):
    with pytest.raises(TokenizerError, match="is not a directory"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(TokenizerError, match="cannot load tokenizer"):
        load_tokenizer(tmp_path)  # exists, but holds no tokenizer


def test_token_dtype():
    assert token_dtype(257) == np.uint16
    assert token_dtype(50257) == np.uint16
    assert token_dtype(128256) == np.uint32


class FakeTokenizer:
    """Only the sizes `check_vocab` reads."""

    def __init__(self, vocab_size: int, eos_id: int) -> None:
        self.name, self.vocab_size, self.eos_id = "fake", vocab_size, eos_id


@pytest.mark.parametrize(
    ("vocab", "eos", "model_vocab", "ok"),
    [
        (257, 256, 257, True),  # the byte tokenizer with the default model
        (50257, 50256, 50304, True),  # GPT-2 with nanoGPT's padded embedding
        (50257, 50256, 257, False),  # an HF tokenizer with the default 257-entry model: IndexError later
        (258, 256, 257, False),  # one id too many
        (100, 300, 257, False),  # EOS outside the embedding
    ],
)
def test_check_vocab_refuses_ids_the_model_cannot_embed(vocab, eos, model_vocab, ok):
    tok = FakeTokenizer(vocab, eos)
    if ok:
        check_vocab(tok, model_vocab)
    else:
        with pytest.raises(TokenizerError, match=f"embeds {model_vocab}"):
            check_vocab(tok, model_vocab)


def test_hf_tokenizer_with_the_default_model_really_fails_without_the_check():
    """The reference for the table above: an id >= the model's vocabulary breaks the embedding lookup."""
    from client_agent.training.model import build_model, lm_loss
    from geofed.config import ModelConfig

    model = build_model(ModelConfig(n_layer=1, n_embd=32, block_size=8))
    with pytest.raises(IndexError):
        lm_loss(model, torch.full((1, 9), 50256))
