"""The federation's tokenizer as a Hugging Face tokenizer directory, written beside an exported model.

`AutoTokenizer.from_pretrained(DIR)` must give the ids the federation trained on. For `model.tokenizer:
byte` that is `client_agent.data.tokenizer.ByteTokenizer`'s: id b for byte b (0-255) and EOS = 256. It is
written as a `PreTrainedTokenizerFast` whose BPE has the 256 byte-level symbols as ids 0-255 and no merges,
so every byte stays one token, plus `<|endoftext|>` as id 256. A local tokenizer directory is loaded and
saved again as it is.

One difference stays: the text `<|endoftext|>` inside a document is the EOS id to the Hugging Face
tokenizer and 13 bytes to `ByteTokenizer`.
"""

from __future__ import annotations

from pathlib import Path

EOS_TEXT = "<|endoftext|>"


def byte_tokenizer(model_max_length: int):
    """A `PreTrainedTokenizerFast` with `ByteTokenizer`'s ids (0-255 the UTF-8 bytes, 256 EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # The byte-level alphabet maps byte b to one printable character; numbering them by byte keeps id == byte.
    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens([EOS_TEXT])  # id 256, the next free one
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=EOS_TEXT, bos_token=EOS_TEXT,
                                   model_max_length=model_max_length)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table of byte -> printable character (the byte-level pre-tokenizer's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def federation_tokenizer(spec: str, *, model_max_length: int, model_vocab: int):
    """The Hugging Face tokenizer for `spec` ("byte" or a local tokenizer directory), to `save_pretrained` beside
    the model.

    Raises `client_agent.data.tokenizer.TokenizerError` for a directory that does not load or whose ids the model
    cannot embed.
    """
    from client_agent.data.tokenizer import ByteTokenizer, check_vocab, load_tokenizer

    if spec == "byte":
        check_vocab(ByteTokenizer(), model_vocab)
        return byte_tokenizer(model_max_length)
    check_vocab(load_tokenizer(spec), model_vocab)  # loads it, refusing what is not a local tokenizer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(spec).expanduser(), local_files_only=True)
    tokenizer.model_max_length = model_max_length
    return tokenizer
