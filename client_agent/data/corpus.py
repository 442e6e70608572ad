"""The embedded demo corpus: Python's own standard-library sources, split non-IID across clients.

Every machine with Python has this corpus, so a demo federation needs no dataset download. Each
client gets whole top-level modules (`asyncio/`, `email/`, `json/`...), so clients see different
code styles and vocabularies: the non-IID setting federated training must survive (paper §I, §III-C2).
Modules are packed largest-first into the least-loaded client to balance bytes; a few seeded modules
are held out as an evaluation set no client trains on.
"""

from __future__ import annotations

import heapq
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TEST_DIRS = frozenset({"test", "tests", "idle_test"})
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


class CorpusError(ValueError):
    """A corpus that cannot be split as asked; one readable line."""


@dataclass(frozen=True)
class CorpusSplit:
    """Per-client training file lists plus the held-out evaluation files."""

    clients: tuple[tuple[Path, ...], ...]
    eval: tuple[Path, ...]


def stdlib_root() -> Path:
    """Directory of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(include_tests: bool = False, root: Path | None = None) -> list[Path]:
    """Every stdlib `.py` file, sorted; third-party packages and (by default) test suites excluded."""
    root = root or stdlib_root()
    skip = SKIP_DIRS if include_tests else SKIP_DIRS | TEST_DIRS
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts[:-1]
        if any(part in skip or part.startswith("config-") for part in parts):
            continue
        if path.is_file():
            files.append(path)
    return sorted(files)


def _group_key(path: Path, root: Path, by_stem: bool) -> str:
    """The top-level entry `path` belongs to: `email/mime/text.py` -> "email", `os.py` -> "os"."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        raise CorpusError(f"{path} is not under {root}") from None
    if len(parts) > 1:
        return parts[0]
    # A top-level file: its stem, so `tokens.bin` stays with its `tokens.json` sidecar.
    return Path(parts[0]).stem if by_stem else parts[0].removesuffix(".py")


def group_by_module(files: Iterable[Path], root: Path, by_stem: bool = False) -> dict[str, list[Path]]:
    """Files grouped by top-level module/package (or directory entry), each group sorted."""
    groups: dict[str, list[Path]] = {}
    for path in files:
        groups.setdefault(_group_key(Path(path), root, by_stem), []).append(Path(path))
    return {key: sorted(paths) for key, paths in sorted(groups.items())}


def _size(paths: Iterable[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def pack_balanced(sizes: dict[str, int], n_bins: int, seed: int = 0) -> list[list[str]]:
    """Largest-first packing of named sizes into `n_bins` non-empty bins; bin order shuffled by `seed`."""
    if n_bins < 1:
        raise CorpusError(f"need at least 1 client, got {n_bins}")
    if len(sizes) < n_bins:
        raise CorpusError(f"only {len(sizes)} groups to share among {n_bins} clients; use fewer clients")
    heap = [(0, i) for i in range(n_bins)]  # (load, bin); ties go to the lowest bin index
    bins: list[list[str]] = [[] for _ in range(n_bins)]
    for name in sorted(sizes, key=lambda k: (-sizes[k], k)):
        load, i = heapq.heappop(heap)
        bins[i].append(name)
        heapq.heappush(heap, (load + sizes[name], i))
    order = np.random.default_rng(seed).permutation(n_bins)
    return [sorted(bins[i]) for i in order]


def holdout_modules(
    files: Sequence[Path], fraction: float, seed: int = 0, root: Path | None = None
) -> tuple[list[Path], list[Path]]:
    """(train, eval): seeded whole modules totalling about `fraction` of the bytes go to eval."""
    if not 0 <= fraction < 1:
        raise CorpusError(f"eval fraction must be in [0, 1), got {fraction}")
    root = root or stdlib_root()
    groups = group_by_module(files, root)
    if fraction == 0:
        return sorted(Path(f) for f in files), []
    sizes = {name: _size(paths) for name, paths in groups.items()}
    target = fraction * sum(sizes.values())
    names = sorted(groups)
    chosen, total = set(), 0
    for i in np.random.default_rng(seed).permutation(len(names)):
        name = names[i]
        if total + sizes[name] <= 1.5 * target:  # skip modules that would overshoot by far
            chosen.add(name)
            total += sizes[name]
        if total >= target:
            break
    if not chosen or len(chosen) == len(groups):
        raise CorpusError(f"cannot hold out {fraction:.0%} of {len(groups)} modules as whole modules")
    train = [p for name in names if name not in chosen for p in groups[name]]
    held = [p for name in names if name in chosen for p in groups[name]]
    return train, held


def split_by_module(files: Sequence[Path], n_clients: int, seed: int = 0, root: Path | None = None) -> list[list[Path]]:
    """Non-IID split: each top-level module goes to exactly one client, bytes balanced, deterministic."""
    root = root or stdlib_root()
    groups = group_by_module(files, root)
    bins = pack_balanced({name: _size(paths) for name, paths in groups.items()}, n_clients, seed)
    return [[p for name in names for p in groups[name]] for names in bins]


def stdlib_split(
    n_clients: int, seed: int = 0, eval_fraction: float = 0.02, include_tests: bool = False
) -> CorpusSplit:
    """The demo corpus ready to use: held-out eval modules, the rest split by module across clients."""
    root = stdlib_root()
    train, held = holdout_modules(stdlib_files(include_tests, root), eval_fraction, seed, root)
    clients = split_by_module(train, n_clients, seed, root)
    return CorpusSplit(clients=tuple(tuple(c) for c in clients), eval=tuple(held))


def split_directory(directory: str | Path, n: int, seed: int = 0) -> list[list[Path]]:
    """Split a user's data files (`client_agent.data.files.is_data_file`: a `.bin`'s sidecar is read beside it, not
    listed) across `n` clients by top-level entry (subdirectory or file stem)."""
    from .files import is_data_file

    directory = Path(directory)
    if not directory.is_dir():
        raise CorpusError(f"data directory {str(directory)!r} does not exist")
    files = sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and is_data_file(p) and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )
    if not files:
        raise CorpusError(f"data directory {str(directory)!r} has no data files")
    groups = group_by_module(files, directory, by_stem=True)
    bins = pack_balanced({name: _size(paths) for name, paths in groups.items()}, n, seed)
    return [[p for name in names for p in groups[name]] for names in bins]


def write_file_list(path: str | Path, files: Iterable[Path]) -> Path:
    """Write a `.list` file, one path per line: what `--data` accepts instead of a directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{p}\n" for p in files), encoding="utf-8")
    return path


def write_split(split: CorpusSplit, out_dir: str | Path) -> list[Path]:
    """Write `client-<i>.list` per client plus `eval.list`; returns the client lists."""
    out_dir = Path(out_dir)
    write_file_list(out_dir / "eval.list", split.eval)
    return [write_file_list(out_dir / f"client-{i}.list", files) for i, files in enumerate(split.clients)]


def read_file_list(path: str | Path) -> list[Path]:
    """Read a list written by `write_file_list`; blank lines ignored."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"file list {str(path)!r} does not exist")
    return [Path(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
