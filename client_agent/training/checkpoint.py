"""Atomic client checkpoints (paper §III-B4): `latest.pt` after every sync plus the K best by eval loss.

A preempted client resumes from `latest.pt` (its optimizer state, data position and error-feedback
residual; the model itself usually comes fresh from the PS). Files are written to a temp file in the
same directory, fsynced and renamed over the old one, so a crash or a full disk never leaves a
half-written file where a good one was. Loading uses `torch.load(weights_only=True)`: no pickle code runs.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 1
LATEST = "latest.pt"
BEST_INDEX = "best.json"
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read; one readable line, the previous file left intact."""


@dataclass
class ClientCheckpoint:
    """Everything a relaunched client needs; `trainer_state()` is what `LocalTrainer.state_dict()` gave."""

    model: torch.Tensor | dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    step: int
    data_position: dict[str, int]
    base_version: int
    residual: dict[str, torch.Tensor] = field(default_factory=dict)
    scaler: dict[str, Any] = field(default_factory=dict)
    eval_loss: float | None = None
    # The paradigm's private state (trained, never exchanged: e.g. Hybrid LoRA's adapters) and what this
    # client runs, declared at its next Join so a changed federation refuses it before the token is spent.
    private: dict[str, torch.Tensor] = field(default_factory=dict)
    paradigm: str = ""
    manifest: list[list[Any]] = field(default_factory=list)  # [name, shape, dtype] per exchanged tensor
    # The round's encoded delta ({"header", "payload"} as uint8), saved before its push: a client preempted
    # mid-push resends it under the same upload id instead of training that round's data again.
    upload: dict[str, torch.Tensor] = field(default_factory=dict)
    # The exact global model of `base_version` the round started from, and the PS instance that published it:
    # a relaunched client holds that version again, so the PS sends only the difference to its newest one
    # (or nothing, when it is still the newest) instead of the whole model (it shortens a rejoin).
    base_model: torch.Tensor | None = None
    base_instance: str = ""

    def trainer_state(self) -> dict[str, Any]:
        """The part `LocalTrainer.load_state_dict` takes."""
        return {
            "optimizer": self.optimizer,
            "step": self.step,
            "data_position": self.data_position,
            "scaler": self.scaler,
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of tensors and primitives, loadable with `weights_only=True`."""
        # Shallow on purpose: `dataclasses.asdict` would deep-copy every tensor (the model, Adam's moments).
        return {"format": FORMAT_VERSION, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: Path) -> ClientCheckpoint:
        """Rebuild from `to_dict` output, refusing other format versions."""
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise CheckpointError(f"{source}: checkpoint format {found!r} is not {FORMAT_VERSION}")
        try:
            return cls(**{k: v for k, v in data.items() if k != "format"})
        except TypeError as exc:
            raise CheckpointError(f"{source}: malformed checkpoint ({exc})") from None


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_error(path: Path, exc: OSError) -> CheckpointError:
    if exc.errno in _DISK_FULL:
        free = shutil.disk_usage(path.parent).free if path.parent.exists() else 0
        return CheckpointError(f"disk full writing {path} ({free >> 20} MiB free); previous file intact")
    return CheckpointError(f"cannot write {path}: {exc.strerror or exc}; the previous file is intact")


def atomic_write(path: str | Path, write: Any) -> Path:
    """Call `write(file)` on a temp file beside `path`, fsync, then rename it over `path` in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, exc) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def save_checkpoint(path: str | Path, ckpt: ClientCheckpoint) -> Path:
    """Write `ckpt` atomically to `path`."""
    return atomic_write(path, lambda f: torch.save(ckpt.to_dict(), f))


def load_checkpoint(path: str | Path) -> ClientCheckpoint:
    """Read a checkpoint with `weights_only=True`; missing or corrupt files raise `CheckpointError`."""
    path = Path(path)
    try:
        # mmap: a rejoining client needs the optimizer state and data position at once, not a full read of
        # a multi-GB file (its model comes from the PS); pages are read as they are restored.
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except Exception as exc:  # torch raises RuntimeError, EOFError or UnpicklingError on damaged files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path} is not a readable checkpoint: {first}") from exc
    return ClientCheckpoint.from_dict(data, path)


class CheckpointManager:
    """`latest.pt` after every sync, and the `keep_best` lowest-eval-loss checkpoints as `best-<step>.pt`.

    Note: the best set is indexed in `best.json` (written atomically after each new best file, before
    pruning), so no checkpoint has to be loaded to rank them. A best file the index lacks (a crash
    between the two writes) is read back once on start-up; one the index lists but which is gone is dropped.
    """

    def __init__(self, directory: str | Path, keep_best: int = 10) -> None:
        if keep_best < 1:
            raise ValueError(f"keep_best must be >= 1, got {keep_best}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keep_best = keep_best
        # A process killed inside atomic_write leaves its temp file; nothing else ever will reclaim it.
        for stale in self.dir.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        self._best: dict[int, float] = self._read_index()

    @property
    def latest_path(self) -> Path:
        return self.dir / LATEST

    def best_path(self, step: int) -> Path:
        return self.dir / f"best-{step}.pt"

    def _read_index(self) -> dict[int, float]:
        """The best set on disk: the index, reconciled with the `best-*.pt` files actually present."""
        index: dict[int, float] = {}
        try:
            raw = json.loads((self.dir / BEST_INDEX).read_text(encoding="utf-8"))
            index = {int(step): float(loss) for step, loss in raw.items()}
        except (OSError, ValueError, AttributeError):
            pass
        present = {}
        for path in self.dir.glob("best-*.pt"):
            try:
                present[int(path.stem.removeprefix("best-"))] = path
            except ValueError:
                continue
        best = {step: loss for step, loss in index.items() if step in present}
        for step in present.keys() - best.keys():
            try:
                loss = load_checkpoint(present[step]).eval_loss
            except CheckpointError:
                continue
            if loss is not None:
                best[step] = float(loss)
        return best

    def _write_index(self) -> None:
        body = json.dumps({str(step): loss for step, loss in sorted(self._best.items())}).encode()
        atomic_write(self.dir / BEST_INDEX, lambda f: f.write(body))

    def save_latest(self, ckpt: ClientCheckpoint) -> Path:
        """Replace `latest.pt` (called after every sync)."""
        return save_checkpoint(self.latest_path, ckpt)

    def load_latest(self) -> ClientCheckpoint | None:
        """The last sync's checkpoint, or None on a first start."""
        if not self.latest_path.exists():
            return None
        return load_checkpoint(self.latest_path)

    def _should_keep(self, eval_loss: float, step: int) -> bool:
        if step in self._best or len(self._best) < self.keep_best:
            return True
        return eval_loss < max(self._best.values())

    def consider(self, eval_loss: float, step: int, ckpt: ClientCheckpoint) -> Path | None:
        """Keep `ckpt` as `best-<step>.pt` if among the `keep_best` lowest eval losses; prune the rest."""
        if not isinstance(eval_loss, int | float) or not math.isfinite(eval_loss):
            raise ValueError(f"eval_loss must be a finite number, got {eval_loss!r}")
        if not self._should_keep(eval_loss, step):
            return None
        path = save_checkpoint(self.best_path(step), dataclasses.replace(ckpt, eval_loss=float(eval_loss)))
        self._best[step] = float(eval_loss)
        pruned = [step for _, step, _ in self.best()[self.keep_best :]]
        for s in pruned:
            del self._best[s]
        self._write_index()
        for s in pruned:
            self.best_path(s).unlink(missing_ok=True)
        return path

    def best(self) -> list[tuple[float, int, Path]]:
        """(eval loss, step, path) of the kept checkpoints, lowest loss first."""
        ranked = sorted(self._best.items(), key=lambda kv: (kv[1], kv[0]))
        return [(loss, step, self.best_path(step)) for step, loss in ranked]

    def load_best(self) -> ClientCheckpoint | None:
        """The lowest-eval-loss checkpoint, or None when none is kept."""
        ranked = self.best()
        return load_checkpoint(ranked[0][2]) if ranked else None
