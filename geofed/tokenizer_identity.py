"""A tokenizer's identity: the sha256 of what decides the ids it gives, the same on a client and on the PS.

Two sites whose tokenizers map text to different ids push deltas to rows of the embedding that mean different
tokens: the global model gets worse with every such push. The identity covers what decides the ids (a Hugging
Face fast tokenizer's canonical JSON: vocabulary, merges, normaliser, pre-tokeniser, added tokens; its special
ids and its length), not where its files are: two copies of one directory have one identity. The built-in byte
tokenizer has a fixed one. Hugging Face libraries are imported only when a directory is read, so the PS (no
torch in its image) imports this module freely.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

BYTE = "byte"  # `model.tokenizer` naming the built-in byte tokenizer
BYTE_SHA256 = hashlib.sha256(b"geofed byte tokenizer: UTF-8 bytes 0..255, EOS 256, 257 ids").hexdigest()
# Parts of a fast tokenizer's JSON that change no id of `encode(text, add_special_tokens=False)`.
_NOT_IDS = ("truncation", "padding", "decoder")


def hf_tokenizer_sha256(tokenizer: Any) -> str:
    """The identity of a loaded Hugging Face tokenizer (`transformers.PreTrainedTokenizerBase`)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        content = json.loads(backend.to_str())
        for key in _NOT_IDS:
            content.pop(key, None)
    else:  # a slow (Python) tokenizer: its vocabulary and class decide the ids
        content = {"class": type(tokenizer).__name__, "vocab": tokenizer.get_vocab()}
    special = {name: getattr(tokenizer, f"{name}_token_id", None) for name in ("eos", "bos", "pad", "unk")}
    canonical = json.dumps({"tokenizer": content, "special_ids": special, "size": len(tokenizer)},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def tokenizer_sha256(spec: str) -> str:
    """The identity of `model.tokenizer`'s value: 'byte' or a local Hugging Face tokenizer directory.

    Raises OSError when the directory cannot be read, ImportError without `transformers`, and ValueError when
    the directory holds no tokenizer `AutoTokenizer` loads."""
    if spec == BYTE:
        return BYTE_SHA256
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise OSError(f"tokenizer path {spec!r} is not a directory")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # transformers raises many types; report them as one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot load tokenizer from {spec!r}: {first}") from exc
    return hf_tokenizer_sha256(tokenizer)


def tokenizer_mismatch(client: str, client_sha256: str, federation: str, federation_sha256: str) -> str:
    """The refusal of a client whose tokenizer is not the federation's (one text on the client and the PS)."""
    return (
        f"this client's tokenizer {client!r} (sha256 {client_sha256}) is not the federation's tokenizer "
        f"{federation!r} (sha256 {federation_sha256}): its token ids would train the wrong embedding rows; "
        "relaunch with --tokenizer DIR, a copy of the federation's tokenizer directory"
    )
