"""Atomic PS checkpoints: global model + outer-optimizer state + version + credential registry.

Write to a temp file in the same directory, fsync, rename, fsync the directory: a crash leaves either
the old file or the new one, never a torn one. Loading uses `torch.load(weights_only=True)`; the
non-tensor state travels as one JSON string, so nothing in a checkpoint can execute code.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .global_model import TensorEntry

log = logging.getLogger("geofed.ps")

_NAME = re.compile(r"^ps-v(\d{12})\.pt$")


@dataclass
class PSCheckpoint:
    """Everything the PS needs to resume."""

    version: int
    flat: np.ndarray
    manifest: tuple[TensorEntry, ...]
    aggregator: dict
    registry: dict


def _tensors_of(obj):
    """Split a nested dict into (JSON-able skeleton, {path: tensor}) so arrays never go through JSON."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(node, path):
        if isinstance(node, np.ndarray):
            tensors[path] = torch.from_numpy(np.ascontiguousarray(node))
            return {"__tensor__": path}
        if isinstance(node, dict):
            return {k: walk(v, f"{path}/{k}") for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(node)]
        return node

    return walk(obj, ""), tensors


def _restore_tensors(node, tensors):
    if isinstance(node, dict):
        if set(node) == {"__tensor__"}:
            return tensors[node["__tensor__"]].numpy()
        return {k: _restore_tensors(v, tensors) for k, v in node.items()}
    if isinstance(node, list):
        return [_restore_tensors(v, tensors) for v in node]
    return node


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """A directory of `ps-v<version>.pt` files; keeps the newest `keep`."""

    def __init__(self, directory: str | os.PathLike, keep: int = 3) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.keep = keep

    def save(self, ckpt: PSCheckpoint) -> Path:
        """Write atomically; raises OSError (e.g. ENOSPC) with the previous checkpoints untouched."""
        skeleton, tensors = _tensors_of({"aggregator": ckpt.aggregator})
        with warnings.catch_warnings():
            # Published snapshots are read-only numpy arrays; torch only reads them here.
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.from_numpy(np.ascontiguousarray(ckpt.flat))
        payload = {
            "format": "geofed-ps/1",
            "version": ckpt.version,
            "flat": flat,
            "manifest": json.dumps([[t.name, list(t.shape), t.dtype] for t in ckpt.manifest]),
            "state": json.dumps({"skeleton": skeleton, "registry": ckpt.registry}),
            "tensors": tensors,
        }
        final = self.dir / f"ps-v{ckpt.version:012d}.pt"
        tmp = self.dir / f".{final.name}.tmp"
        try:
            with open(tmp, "wb") as f:
                torch.save(payload, f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._prune()
        return final

    def _files(self) -> list[Path]:
        found = [p for p in self.dir.iterdir() if _NAME.match(p.name)]
        return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)), reverse=True)

    def _prune(self) -> None:
        for old in self._files()[self.keep :]:
            old.unlink(missing_ok=True)

    def load_latest(self) -> PSCheckpoint | None:
        """The newest checkpoint that loads cleanly; corrupt files are skipped with a log line."""
        for path in self._files():
            try:
                return self._load(path)
            except Exception as exc:  # a torn or foreign file must not stop the PS from starting
                log.error("event=checkpoint_unreadable path=%s error=%s", path, exc)
        return None

    @staticmethod
    def _load(path: Path) -> PSCheckpoint:
        payload = torch.load(path, weights_only=True, map_location="cpu")
        if payload.get("format") != "geofed-ps/1":
            raise ValueError("not a geofed PS checkpoint")
        state = json.loads(payload["state"])
        aggregator = _restore_tensors(state["skeleton"], payload["tensors"])["aggregator"]
        manifest = tuple(TensorEntry(n, tuple(s), d) for n, s, d in json.loads(payload["manifest"]))
        flat = payload["flat"].numpy().copy()
        return PSCheckpoint(int(payload["version"]), flat, manifest, aggregator, state["registry"])
