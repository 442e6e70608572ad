"""A site's private training data: files tokenised once, as one token array or as prompt/completion examples.

Accepted inputs: text files (`.txt`, `.text`, `.md`, `.py`, and files with no suffix), JSON Lines, and
pre-tokenised `.bin` token files (nanoGPT layout; an optional sidecar `<stem>.json` such as
`{"dtype": "uint32"}` overrides the default uint16); other suffixes are not data. A JSONL record is text
or a prompt/completion example in one of the schemas `client_agent.data.records` reads. Text documents are
joined with EOS into one token array that `streams.TokenStream` cuts into windows; examples (prompt ids,
completion ids, EOS each) become `Examples`, which `streams.ExampleStream` serves one per row with the loss on
the completion only; a preference record becomes the example (prompt, chosen), and `Examples.preferences`
says so. A run trains on one kind: data mixing text, prompt/completion and preference records is refused.
Every file must be usable: a binary or non-UTF-8 file, a JSONL line of no known schema, an empty or
missing source is a DataError naming it, so a site never trains on silently less than it holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from client_agent.data.records import DataError, Preference, Record, jsonl_records
from client_agent.data.tokenizer import Tokenizer, token_dtype

TEXT_SUFFIXES = (".txt", ".text", ".md", ".py")
JSONL_SUFFIXES = (".jsonl",)
BIN_SUFFIXES = (".bin",)
BIN_DTYPES = ("uint16", "uint32")


@dataclass(frozen=True)
class LoadReport:
    """What loading found: files read, tokens (and examples) produced."""

    files: int
    tokens: int
    examples: int = 0  # prompt/completion examples; 0 for text data


@dataclass(frozen=True)
class Examples:
    """Tokenised prompt/completion examples: example i is `tokens[starts[i]:starts[i + 1]]`, its prompt ids,
    completion ids and EOS, of which the first `prompt_lens[i]` are the prompt's. `origins[i]` is the
    (index into `files`, 1-based line) it was read from."""

    tokens: np.ndarray
    starts: np.ndarray  # int64 [n + 1]
    prompt_lens: np.ndarray  # int64 [n]
    origins: np.ndarray  # int64 [n, 2]
    files: tuple[str, ...]
    preferences: bool = False  # read from preference records: each example is (prompt, chosen)

    def __len__(self) -> int:
        return int(self.prompt_lens.size)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per example (prompt, completion and EOS)."""
        return np.diff(self.starts)

    @property
    def counted(self) -> np.ndarray:
        """Targets per example the loss counts: its completion's tokens and the EOS."""
        return self.lengths - self.prompt_lens

    def part(self, lo: int, hi: int) -> Examples:
        """Examples `lo` to `hi` (exclusive), sharing this token array."""
        return Examples(self.tokens, self.starts[lo : hi + 1], self.prompt_lens[lo:hi], self.origins[lo:hi], self.files,
                        self.preferences)

    def where(self, i: int) -> str:
        """`path:line` of example `i`."""
        return f"{self.files[int(self.origins[i, 0])]}:{int(self.origins[i, 1])}"


TrainingData = np.ndarray | Examples


@dataclass(frozen=True)
class Fit:
    """How examples fit rows of `block_size + 1` tokens: `cut` lose the start of their prompt (at least one
    prompt token stays); `unfit` cannot fit, their completion and EOS alone being longer than `block_size`."""

    total: int
    cut: int
    unfit: int
    first_unfit: str = ""  # `path:line` of the first that cannot fit

    @classmethod
    def of(cls, examples: Examples, block_size: int) -> Fit:
        unfit = np.flatnonzero(examples.counted > block_size)
        cut = int(np.count_nonzero(examples.lengths > block_size + 1)) - unfit.size
        return cls(len(examples), cut, int(unfit.size), examples.where(int(unfit[0])) if unfit.size else "")

    def __add__(self, other: Fit) -> Fit:
        return Fit(self.total + other.total, self.cut + other.cut, self.unfit + other.unfit,
                   self.first_unfit or other.first_unfit)

    def refusal(self, block_size: int) -> str:
        """The one-line error for examples that cannot fit ("" when all fit)."""
        if not self.unfit:
            return ""
        return (f"{self.unfit} of {self.total} examples cannot fit a row of {block_size + 1} tokens (the completion"
                f" and EOS alone exceed {block_size}), the first at {self.first_unfit}; shorten them or raise"
                " model.block_size")

    def log_line(self, block_size: int) -> str:
        """The structured log line for examples cut to fit."""
        return (f"event=examples_cut examples={self.cut} of={self.total} block_size={block_size}"
                " how=prompt_start_dropped")


def is_data_file(path: Path) -> bool:
    """A data file: a known suffix, or none (README, LICENSE: read as text)."""
    return path.suffix.lower() in ("", *TEXT_SUFFIXES, *JSONL_SUFFIXES, *BIN_SUFFIXES)


def collect_files(directory: str | Path) -> list[Path]:
    """Data files under `directory` (recursive, hidden entries skipped, other suffixes ignored), sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"data directory {str(directory)!r} does not exist")
    files = sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and is_data_file(p) and not any(s[0] == "." for s in p.relative_to(directory).parts)
    )
    if not files:
        raise DataError(
            f"data directory {str(directory)!r} has no data files"
            f" ({', '.join(TEXT_SUFFIXES + JSONL_SUFFIXES + BIN_SUFFIXES)} or no suffix)"
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


def read_text(path: Path) -> str:
    """A file's UTF-8 text; a DataError for one that cannot be read, is binary (NUL bytes) or is not UTF-8."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if b"\x00" in raw:
        raise DataError(f"{path}: a binary file (it holds NUL bytes); data files are UTF-8 text, JSONL or .bin tokens")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None


def file_records(path: Path, tokenizer: Tokenizer) -> list[tuple[Record, int]]:
    """A text or JSONL file's records, each with its line (a text file is one document, line 1)."""
    raw = read_text(path)
    if path.suffix.lower() in JSONL_SUFFIXES:
        return list(jsonl_records(raw, path, tokenizer))
    return [(raw, 1)]


def _encode_docs(texts: list[str], tokenizer: Tokenizer, dtype: np.dtype) -> list[np.ndarray]:
    """Each non-empty document's ids followed by EOS."""
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    out = []
    for text in texts:
        if text:
            out.append(np.asarray(tokenizer.encode(text), dtype=dtype))
            out.append(eos)
    return out


class _ExampleBuilder:
    """Collects tokenised examples into `Examples`."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.pieces: list[np.ndarray] = []
        self.prompt_lens: list[int] = []
        self.origins: list[tuple[int, int]] = []
        self.files: list[str] = []
        self.pair_at = ""  # where the first prompt/completion record was read
        self.preference_at = ""  # where the first preference record was read

    def add_file(self, path: Path, records: list[tuple[Record, int]], tokenizer: Tokenizer) -> None:
        """Each record's example, (prompt, completion) or a preference's (prompt, chosen); a DataError when
        prompt/completion and preference records mix (no paradigm trains on both)."""
        self.files.append(str(path))
        for record, line in records:
            if isinstance(record, Preference):
                prompt, completion = record.prompt, record.chosen
                self.preference_at = self.preference_at or record.where
            else:
                prompt, completion = record
                self.pair_at = self.pair_at or f"{path}:{line}"
            if self.pair_at and self.preference_at:
                raise DataError(f"the data mix prompt/completion records ({self.pair_at}) and preference records "
                                f"({self.preference_at}); train on one kind")
            ids = tokenizer.encode(prompt)
            self.pieces.append(np.asarray([*ids, *tokenizer.encode(completion), tokenizer.eos_id], dtype=self.dtype))
            self.prompt_lens.append(len(ids))
            self.origins.append((len(self.files) - 1, line))

    def build(self) -> Examples:
        starts = np.zeros(len(self.pieces) + 1, dtype=np.int64)
        np.cumsum([p.size for p in self.pieces], out=starts[1:])
        return Examples(
            tokens=np.concatenate(self.pieces),
            starts=starts,
            prompt_lens=np.asarray(self.prompt_lens, dtype=np.int64),
            origins=np.asarray(self.origins, dtype=np.int64).reshape(-1, 2),
            files=tuple(self.files),
            preferences=bool(self.preference_at),
        )


def tokenize_files(files: Sequence[Path], tokenizer: Tokenizer) -> tuple[TrainingData, LoadReport]:
    """Tokenise `files` in order: text into one array (a zero-copy memmap when the source is a single
    `.bin`), or prompt/completion records into `Examples`; data holding both kinds is a DataError, as is
    a file that cannot be read (`read_text`) or a JSONL line of no known schema (`client_agent.data.records`)."""
    if not files:
        raise DataError("no data files given")
    dtype = token_dtype(tokenizer.vocab_size)
    pieces: list[np.ndarray] = []
    examples = _ExampleBuilder(dtype)
    text_at = ""  # where the first text was read, for the mixed-data error
    for path in map(Path, files):
        if path.suffix.lower() in BIN_SUFFIXES:
            try:
                arr = _read_bin(path)
            except (OSError, ValueError) as exc:
                raise DataError(f"{path}: not a token file ({exc})") from None
            if int(arr.max()) >= tokenizer.vocab_size:  # a wrong tokenizer is a setup error, not a bad file
                raise DataError(
                    f"{path} holds token id {int(arr.max())} >= vocab size {tokenizer.vocab_size}:"
                    " it was tokenised with another tokenizer"
                )
            pieces.append(arr)
            text_at = text_at or str(path)
            continue
        records = file_records(path, tokenizer)
        texts = [r for r, _ in records if isinstance(r, str)]
        pieces.extend(_encode_docs(texts, tokenizer, dtype))
        if not text_at:
            jsonl = path.suffix.lower() in JSONL_SUFFIXES
            texts_at = (f"{path}:{line}" if jsonl else str(path) for r, line in records if isinstance(r, str) and r)
            text_at = next(texts_at, "")
        pairs = [(r, line) for r, line in records if not isinstance(r, str)]
        if pairs:
            examples.add_file(path, pairs, tokenizer)
    pieces = [p for p in pieces if p.size]
    if examples.pieces:
        if text_at:
            first = examples.build().where(0)
            kind = "preference" if examples.preference_at else "prompt/completion"
            raise DataError(f"the data mix text ({text_at}) and {kind} records ({first}); train on one kind")
        built = examples.build()
        return built, LoadReport(files=len(files), tokens=int(built.tokens.size), examples=len(built))
    if not pieces:
        raise DataError(f"no usable tokens in {len(files)} files (all empty)")
    tokens = pieces[0] if len(pieces) == 1 else np.concatenate([p.astype(dtype, copy=False) for p in pieces])
    return tokens, LoadReport(files=len(files), tokens=int(tokens.size))


def _fingerprint(files: Sequence[Path], tokenizer: Tokenizer) -> dict:
    """What the cached tokens depend on: the tokenizer (its identity: a tokenizer retrained at the same path
    gives other ids) and each file's path, size and mtime."""
    entries = []
    for path in files:
        try:
            st = Path(path).stat()
            entries.append([str(path), st.st_size, st.st_mtime_ns])
        except OSError:
            entries.append([str(path), -1, -1])
    return {"tokenizer": tokenizer.name, "tokenizer_sha256": tokenizer.sha256, "vocab_size": tokenizer.vocab_size,
            "files": entries}


def load_data(
    source: str | Path | Sequence[Path], tokenizer: Tokenizer, cache: str | Path | None = None
) -> tuple[TrainingData, LoadReport]:
    """Tokens or examples of a data directory or file list; with `cache` (a `.npy` path) tokenise once, then
    load the cache (text: memory-mapped `cache`; examples: `<stem>.examples.npz` beside it)."""
    files = collect_files(source) if isinstance(source, str | Path) else [Path(p) for p in source]
    if cache is None:
        return tokenize_files(files, tokenizer)
    cache = Path(cache)
    meta_path = cache.with_suffix(".json")
    examples_path = cache.with_suffix(".examples.npz")
    fingerprint = _fingerprint(files, tokenizer)
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta.get("fingerprint") == fingerprint:
                report = meta["report"]
                if meta.get("kind", "tokens") == "examples" and "preferences" in meta:  # else from an older reader
                    with np.load(examples_path, allow_pickle=False) as z:
                        arrays = {k: z[k] for k in ("tokens", "starts", "prompt_lens", "origins")}
                    examples = Examples(**arrays, files=tuple(meta["files"]), preferences=bool(meta["preferences"]))
                    return examples, LoadReport(**report)
                if cache.is_file():
                    return np.load(cache, mmap_mode="r", allow_pickle=False), LoadReport(**report)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is rebuilt below
    loaded, report = tokenize_files(files, tokenizer)
    cache.parent.mkdir(parents=True, exist_ok=True)
    meta = {"fingerprint": fingerprint, "report": asdict(report)}
    if isinstance(loaded, Examples):
        meta |= {"kind": "examples", "files": list(loaded.files), "preferences": loaded.preferences}
        target, write = examples_path, lambda f: np.savez(
            f, tokens=loaded.tokens, starts=loaded.starts, prompt_lens=loaded.prompt_lens, origins=loaded.origins
        )
    else:
        target, write = cache, lambda f: np.save(f, np.ascontiguousarray(loaded), allow_pickle=False)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
    os.replace(tmp, target)
    tmp_meta = meta_path.with_name(f".{meta_path.name}.tmp-{os.getpid()}")
    tmp_meta.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp_meta, meta_path)
    return loaded, report


def load_tokens(
    source: str | Path | Sequence[Path], tokenizer: Tokenizer, cache: str | Path | None = None
) -> tuple[np.ndarray, LoadReport]:
    """Tokens of a data directory or file list of text (`load_data`); prompt/completion data is a DataError."""
    loaded, report = load_data(source, tokenizer, cache)
    if isinstance(loaded, Examples):
        raise DataError(f"{loaded.where(0)} holds prompt/completion records; this use needs text data")
    return loaded, report
