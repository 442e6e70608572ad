"""The byte tokenizer written beside an exported model gives `ByteTokenizer`'s ids, id for id."""

from __future__ import annotations

import random

import pytest

from client_agent.data.tokenizer import ByteTokenizer, TokenizerError
from geofed_apps.hf_tokenizer import federation_tokenizer

TEXTS = [
    "def grüße(名前):\n\treturn f'héllo {名前} 🙂'\r\n",
    "  leading spaces, trailing  \n\n\x00\x01\x7f ÿ Ā ǅ",
    "".join(chr(c) for c in range(1, 0x250)),
]


def test_saved_byte_tokenizer_encodes_and_decodes_like_byte_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    # Prepare
    federation_tokenizer("byte", model_max_length=128, model_vocab=257).save_pretrained(tmp_path)
    rng = random.Random(0)
    texts = TEXTS + ["".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(200)) for _ in range(20)]

    # Execute
    loaded = AutoTokenizer.from_pretrained(tmp_path)

    # Assert
    assert len(loaded) == ByteTokenizer.vocab_size and loaded.eos_token_id == ByteTokenizer.eos_id
    for text in texts:
        ids = loaded.encode(text)
        assert ids == ByteTokenizer().encode(text).tolist()
        assert loaded.decode(ids) == text == ByteTokenizer().decode(ids)


def test_byte_tokenizer_is_refused_for_a_model_with_fewer_ids():
    with pytest.raises(TokenizerError, match="257 ids .* embeds 200"):
        federation_tokenizer("byte", model_max_length=128, model_vocab=200)
