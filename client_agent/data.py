"""A site's private training data: files tokenised once into one contiguous token array.

Accepted inputs: text files (`.txt`, `.text`, `.md`, `.py`), JSON Lines with a `text` field, and
pre-tokenised `.bin` token files (nanoGPT layout; an optional sidecar `<stem>.json` such as
`{"dtype": "uint32"}` overrides the default uint16). Unreadable or non-UTF-8 files are skipped and
counted, never fatal; an empty or missing source is an error. Documents are joined with EOS.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from client_agent.tokenizer import Tokenizer, token_dtype

TEXT_SUFFIXES = (".txt", ".text", ".md", ".py")
JSONL_SUFFIXES = (".jsonl",)
BIN_SUFFIXES = (".bin",)
BIN_DTYPES = ("uint16", "uint32")


class DataError(ValueError):
    """Training data that cannot be used; one readable line."""


@dataclass(frozen=True)
class LoadReport:
    """What loading found: files used and skipped (with why), bad JSONL records, tokens produced."""

    files: int
    tokens: int
    skipped: int = 0
    skipped_records: int = 0
    skipped_paths: tuple[str, ...] = field(default_factory=tuple)


def _supported(path: Path) -> bool:
    return path.suffix.lower() in TEXT_SUFFIXES + JSONL_SUFFIXES + BIN_SUFFIXES


def collect_files(directory: str | Path) -> list[Path]:
    """Supported data files under `directory` (recursive, hidden entries skipped), sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"data directory {str(directory)!r} does not exist")
    files = sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and _supported(p) and not any(s[0] == "." for s in p.relative_to(directory).parts)
    )
    if not files:
        raise DataError(
            f"data directory {str(directory)!r} has no data files"
            f" ({', '.join(TEXT_SUFFIXES + JSONL_SUFFIXES + BIN_SUFFIXES)})"
        )
    return files


def _read_bin(path: Path) -> np.ndarray:
    """Memory-map a token file; its dtype comes from the sidecar `<stem>.json`, else uint16."""
    dtype = "uint16"
    sidecar = path.with_suffix(".json")
    if sidecar.is_file():
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        dtype = meta.get("dtype", dtype) if isinstance(meta, dict) else None
        if dtype not in BIN_DTYPES:
            raise ValueError(f"sidecar dtype must be one of {BIN_DTYPES}, got {dtype!r}")
    itemsize = np.dtype(dtype).itemsize
    size = path.stat().st_size
    if size == 0 or size % itemsize:
        raise ValueError(f"size {size} is not a positive multiple of {itemsize} ({dtype})")
    return np.memmap(path, dtype=dtype, mode="r")


def _jsonl_texts(raw: str) -> tuple[list[str], int]:
    """The `text` of each JSONL record, and how many lines were not records with a string `text`."""
    texts, bad = [], 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            texts.append(record["text"])
        else:
            bad += 1
    return texts, bad


def _encode_docs(texts: list[str], tokenizer: Tokenizer, dtype: np.dtype) -> list[np.ndarray]:
    """Each non-empty document's ids followed by EOS."""
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    out = []
    for text in texts:
        if text:
            out.append(np.asarray(tokenizer.encode(text), dtype=dtype))
            out.append(eos)
    return out


def tokenize_files(files: Sequence[Path], tokenizer: Tokenizer) -> tuple[np.ndarray, LoadReport]:
    """Tokenise `files` in order into one array (a zero-copy memmap when the source is a single `.bin`)."""
    if not files:
        raise DataError("no data files given")
    dtype = token_dtype(tokenizer.vocab_size)
    pieces: list[np.ndarray] = []
    used, skipped, bad_records = 0, [], 0
    for path in map(Path, files):
        suffix = path.suffix.lower()
        try:
            if suffix in BIN_SUFFIXES:
                arr = _read_bin(path)
            else:
                raw = path.read_bytes().decode("utf-8")
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            skipped.append(f"{path}: {type(exc).__name__}")
            continue
        if suffix in BIN_SUFFIXES:
            if int(arr.max()) >= tokenizer.vocab_size:  # a wrong tokenizer is a setup error, not a bad file
                raise DataError(
                    f"{path} holds token id {int(arr.max())} >= vocab size {tokenizer.vocab_size}:"
                    " it was tokenised with another tokenizer"
                )
            pieces.append(arr)
        else:
            texts, bad = _jsonl_texts(raw) if suffix in JSONL_SUFFIXES else ([raw], 0)
            bad_records += bad
            pieces.extend(_encode_docs(texts, tokenizer, dtype))
        used += 1
    pieces = [p for p in pieces if p.size]
    if not pieces:
        raise DataError(f"no usable tokens in {len(files)} files ({len(skipped)} unreadable or not UTF-8)")
    tokens = pieces[0] if len(pieces) == 1 else np.concatenate([p.astype(dtype, copy=False) for p in pieces])
    report = LoadReport(
        files=used,
        tokens=int(tokens.size),
        skipped=len(skipped),
        skipped_records=bad_records,
        skipped_paths=tuple(skipped),
    )
    return tokens, report


def _fingerprint(files: Sequence[Path], tokenizer: Tokenizer) -> dict:
    """What the cached tokens depend on: the tokenizer and each file's path, size and mtime."""
    entries = []
    for path in files:
        try:
            st = Path(path).stat()
            entries.append([str(path), st.st_size, st.st_mtime_ns])
        except OSError:
            entries.append([str(path), -1, -1])
    return {"tokenizer": tokenizer.name, "vocab_size": tokenizer.vocab_size, "files": entries}


def load_tokens(
    source: str | Path | Sequence[Path], tokenizer: Tokenizer, cache: str | Path | None = None
) -> tuple[np.ndarray, LoadReport]:
    """Tokens of a data directory or file list; with `cache` (a `.npy` path) tokenise once, then mmap."""
    files = collect_files(source) if isinstance(source, str | Path) else [Path(p) for p in source]
    if cache is None:
        return tokenize_files(files, tokenizer)
    cache = Path(cache)
    meta_path = cache.with_suffix(".json")
    fingerprint = _fingerprint(files, tokenizer)
    if cache.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("fingerprint") == fingerprint:
                report = meta["report"]
                report["skipped_paths"] = tuple(report["skipped_paths"])
                return np.load(cache, mmap_mode="r", allow_pickle=False), LoadReport(**report)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is rebuilt below
    tokens, report = tokenize_files(files, tokenizer)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(tokens), allow_pickle=False)
    os.replace(tmp, cache)
    meta = {"fingerprint": fingerprint, "report": asdict(report)}
    tmp_meta = meta_path.with_name(f".{meta_path.name}.tmp-{os.getpid()}")
    tmp_meta.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp_meta, meta_path)
    return tokens, report


def shard_tokens(tokens: np.ndarray, index: int, n: int) -> np.ndarray:
    """Contiguous `index`-th of `n` equal slices (an IID split when a source cannot be split by file)."""
    if not 0 <= index < n:
        raise DataError(f"shard index {index} out of range for {n} shards")
    return tokens[index * tokens.size // n : (index + 1) * tokens.size // n]


def split_tail(tokens: np.ndarray, fraction: float, min_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, eval): the last `fraction` of the tokens (at least `min_tokens`) held out for evaluation."""
    if not 0 < fraction < 1:
        raise DataError(f"eval fraction must be in (0, 1), got {fraction}")
    n_eval = max(int(tokens.size * fraction), min_tokens)
    if tokens.size - n_eval < min_tokens:
        raise DataError(f"{tokens.size} tokens are too few to hold out {n_eval} for evaluation and train")
    return tokens[: tokens.size - n_eval], tokens[tokens.size - n_eval :]


def rank_rows(batch_size: int, rank: int, world: int) -> slice:
    """Rows of a global batch that `rank` of `world` trains on: contiguous, sizes differing by at most one."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} out of range for world size {world}")
    return slice(batch_size * rank // world, batch_size * (rank + 1) // world)


class TokenStream:
    """Seeded random windows of `block_size + 1` tokens with a resumable position (epoch, index).

    Each epoch lays a grid of windows over the tokens at a seeded offset and visits them in a seeded
    permutation, so an epoch sees every window once. The position is all the state: saving it in the
    client checkpoint (§III-B4) lets a relaunched client continue with exactly the batches it would
    have drawn, neither repeating nor skipping data. Under FSDP every rank draws the same global batch
    and keeps only its rows (`rank_rows`), so the positions agree across ranks.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        block_size: int,
        seed: int = 0,
        *,
        eval_tokens: np.ndarray | None = None,
        eval_fraction: float = 0.05,
    ) -> None:
        if block_size < 1:
            raise DataError(f"block_size must be >= 1, got {block_size}")
        tokens = np.asarray(tokens)
        if tokens.ndim != 1:
            raise DataError(f"tokens must be 1-D, got shape {tokens.shape}")
        if eval_tokens is None:
            tokens, eval_tokens = split_tail(tokens, eval_fraction, block_size + 1)
        for what, arr in (("training", tokens), ("evaluation", eval_tokens)):
            if arr.size < block_size + 1:
                raise DataError(f"{arr.size} {what} tokens are fewer than one window of {block_size + 1}")
        self.tokens, self.eval_tokens = tokens, np.asarray(eval_tokens)
        self.block_size, self.seed = block_size, seed
        self.epoch, self.index = 0, 0
        self._window = np.arange(block_size + 1, dtype=np.int64)
        self._epoch_cache: tuple[int, np.ndarray] | None = None

    def _epoch_starts(self, epoch: int) -> np.ndarray:
        """Window start offsets of `epoch`, in visiting order."""
        if self._epoch_cache is not None and self._epoch_cache[0] == epoch:
            return self._epoch_cache[1]
        rng = np.random.default_rng([self.seed, epoch])
        T, n_tok = self.block_size, self.tokens.size
        offset = int(rng.integers(0, min(T - 1, n_tok - T - 1) + 1))
        n_windows = (n_tok - 1 - offset) // T
        starts = offset + rng.permutation(n_windows).astype(np.int64) * T
        self._epoch_cache = (epoch, starts)
        return starts

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, index of the next window within the epoch)."""
        return self.epoch, self.index

    def _gather(self, tokens: np.ndarray, starts: np.ndarray) -> torch.Tensor:
        """LongTensor [len(starts), T+1] of the windows at `starts`, one vectorised gather."""
        return torch.from_numpy(tokens[starts[:, None] + self._window].astype(np.int64))

    def next_batch(self, batch_size: int, rank: int = 0, world: int = 1) -> torch.Tensor:
        """The next global batch of `batch_size` windows; this rank's rows of it, LongTensor [b, T+1]."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        rows = rank_rows(batch_size, rank, world)
        chunks, need = [], batch_size
        while need:
            starts = self._epoch_starts(self.epoch)
            take = starts[self.index : self.index + need]
            chunks.append(take)
            need -= take.size
            self.index += take.size
            if self.index == starts.size:
                self.epoch, self.index = self.epoch + 1, 0
        return self._gather(self.tokens, np.concatenate(chunks)[rows])

    def eval_batches(self, n: int, batch_size: int, rank: int = 0, world: int = 1) -> list[torch.Tensor]:
        """`n` fixed batches of evenly spaced held-out windows, the same every call (comparable losses)."""
        if n < 1 or batch_size < 1:
            raise ValueError(f"need n >= 1 and batch_size >= 1, got n={n}, batch_size={batch_size}")
        last = self.eval_tokens.size - self.block_size - 1
        starts = np.linspace(0, last, n * batch_size).round().astype(np.int64).reshape(n, batch_size)
        rows = rank_rows(batch_size, rank, world)
        return [self._gather(self.eval_tokens, s[rows]) for s in starts]

    def state_dict(self) -> dict[str, int]:
        """The position plus what it is only valid for (seed, window, data size)."""
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "block_size": self.block_size,
            "num_tokens": int(self.tokens.size),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at a saved position; refuse one taken on other data, seed or window size."""
        for key in ("seed", "block_size", "num_tokens"):
            mine = int(self.tokens.size) if key == "num_tokens" else getattr(self, key)
            if int(state[key]) != mine:
                raise DataError(f"data position was saved with {key}={int(state[key])}; here it is {mine}")
        epoch, index = int(state["epoch"]), int(state["index"])
        if epoch < 0 or not 0 <= index < self._epoch_starts(epoch).size:
            raise DataError(f"data position ({epoch}, {index}) is outside the data")
        self.epoch, self.index = epoch, index
