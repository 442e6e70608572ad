"""Tokenizers with one small interface: a built-in byte tokenizer, or a Hugging Face one from local files.

The byte tokenizer needs no download and no training, so a fresh site can join a pretraining
federation with nothing but its text (vocab 257 = 256 bytes + EOS, `ModelConfig.vocab_size`'s default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from geofed.tokenizer_identity import BYTE, BYTE_SHA256, hf_tokenizer_sha256, tokenizer_mismatch


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded; one readable line."""


@runtime_checkable
class Tokenizer(Protocol):
    """What the data pipeline needs from a tokenizer."""

    name: str
    vocab_size: int
    eos_id: int
    sha256: str  # its identity (geofed.tokenizer_identity): a federation's clients all tokenise with one

    def encode(self, text: str) -> list[int] | np.ndarray: ...

    def decode(self, ids: list[int] | np.ndarray) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255, plus EOS = 256 between documents."""

    name = BYTE
    vocab_size = 257
    eos_id = 256
    sha256 = BYTE_SHA256

    def encode(self, text: str) -> np.ndarray:
        """The UTF-8 bytes of `text` as uint16 token ids (vectorised, no per-byte loop)."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def decode(self, ids: list[int] | np.ndarray) -> str:
        """Bytes back to text; EOS and out-of-range ids are dropped, broken UTF-8 is replaced."""
        arr = np.asarray(ids, dtype=np.int64)
        return arr[(arr >= 0) & (arr < 256)].astype(np.uint8).tobytes().decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face tokenizer behind the same interface (ids without special tokens; EOS added by data)."""

    def __init__(self, tokenizer, path: Path) -> None:
        if tokenizer.eos_token_id is None:
            raise TokenizerError(f"tokenizer at {str(path)!r} defines no EOS token")
        # Documents are far longer than the model context; windows are cut later, so silence the length check.
        tokenizer.model_max_length = 1 << 62
        self._tok = tokenizer
        self.name = f"hf:{path.resolve()}"
        self.vocab_size = len(tokenizer)
        self.eos_id = int(tokenizer.eos_token_id)
        self.sha256 = hf_tokenizer_sha256(tokenizer)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS."""
        return self._tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int] | np.ndarray) -> str:
        """Ids back to text."""
        return self._tok.decode(np.asarray(ids).tolist())

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer can render chats (`render_chat`): its files define a chat template."""
        return bool(getattr(self._tok, "chat_template", None))

    def render_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        """`messages` rendered as text with the tokenizer's chat template."""
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def load_tokenizer(path: str | Path | None) -> ByteTokenizer | HFTokenizer:
    """`AutoTokenizer` from a local directory (never downloads), or the byte tokenizer when `path` is None or
    'byte' (`model.tokenizer`'s value for it)."""
    if path is None or path == BYTE:
        return ByteTokenizer()
    path = Path(path).expanduser()
    if not path.is_dir():
        raise TokenizerError(f"tokenizer path {str(path)!r} is not a directory")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # transformers and safetensors raise many types; report them as one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TokenizerError(f"cannot load tokenizer from {str(path)!r}: {first}") from exc
    return HFTokenizer(tokenizer, path)


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest unsigned dtype holding every id: uint16 up to 65536 ids (GPT-2), else uint32 (Llama 3)."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def check_vocab(tokenizer: Tokenizer, model_vocab: int) -> None:
    """Refuse a tokenizer whose ids the model cannot embed (ids >= `model_vocab`).

    A larger model vocabulary is fine (nanoGPT pads GPT-2's 50257 to 50304); a smaller one makes the
    embedding lookup fail mid-training (IndexError on CPU, a device-side assert on CUDA).
    """
    if tokenizer.vocab_size > model_vocab or not 0 <= tokenizer.eos_id < model_vocab:
        raise TokenizerError(
            f"tokenizer {tokenizer.name!r} has {tokenizer.vocab_size} ids (EOS {tokenizer.eos_id}) but the"
            f" federation's model embeds {model_vocab}: use the federation's tokenizer, or a model.vocab_size"
            f" of at least {tokenizer.vocab_size}"
        )


def check_identity(tokenizer: Tokenizer, federation: str, federation_sha256: str, *, given: bool = True) -> None:
    """Refuse a tokenizer whose identity is not the federation's (`federation_sha256`; empty: not known yet).

    `federation` names the federation's tokenizer ('byte', or a directory on the PS's or the master's machine);
    when this client was given no tokenizer and that directory exists here, the refusal says to use it."""
    if not federation_sha256 or tokenizer.sha256 == federation_sha256:
        return
    message = tokenizer_mismatch(tokenizer.name, tokenizer.sha256, federation, federation_sha256)
    local = Path(federation.removeprefix("hf:")).expanduser()
    if not given and federation != BYTE and local.is_dir():
        message += f" (this client was given no --tokenizer; {str(local)!r} is a directory here)"
    raise TokenizerError(message)
