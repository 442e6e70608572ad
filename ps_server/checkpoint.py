"""Atomic PS checkpoints: global model + outer-optimizer state + version + credential registry.

Files are in the safetensors format (8-byte header length, JSON header, raw little-endian arrays), written
*streaming*: each array goes to disk straight from its buffer, so a checkpoint never needs a second copy
of the model in memory, and the PS does not need torch at all. Non-tensor state (hashes, upload ids)
rides in the header's `__metadata__` as JSON. Write to a temp file, fsync, rename, fsync the directory:
a crash leaves either the old file or the new one, never a torn one. Nothing in a checkpoint can execute.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open

from .global_model import TensorEntry

log = logging.getLogger("geofed.ps")

_NAME = re.compile(r"^ps-v(\d{12})\.safetensors$")
_FORMAT = "geofed-ps/2"


@dataclass
class PSCheckpoint:
    """Everything the PS needs to resume."""

    version: int
    flat: np.ndarray
    manifest: tuple[TensorEntry, ...]
    aggregator: dict
    registry: dict


def _split_arrays(obj, arrays: dict[str, np.ndarray], path: str = "state"):
    """Replace numpy arrays in a nested structure by {"__array__": key}, collecting them in `arrays`."""
    if isinstance(obj, np.ndarray):
        arrays[path] = obj
        return {"__array__": path}
    if isinstance(obj, dict):
        return {k: _split_arrays(v, arrays, f"{path}/{k}") for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_split_arrays(v, arrays, f"{path}/{i}") for i, v in enumerate(obj)]
    return obj


def _join_arrays(obj, load):
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            return load(obj["__array__"])
        return {k: _join_arrays(v, load) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join_arrays(v, load) for v in obj]
    return obj


def write_safetensors(path: Path, arrays: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Stream `arrays` into a safetensors file at `path` (fsynced); no array is copied."""
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name, arr in arrays.items():
        if arr.dtype != np.float32:
            raise TypeError(f"{name}: only float32 arrays are checkpointed, got {arr.dtype}")
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the data section 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in arrays.values():
            f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """A directory of `ps-v<version>.safetensors` files; keeps the newest `keep`."""

    def __init__(self, directory: str | os.PathLike, keep: int = 3) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.keep = keep

    def save(self, ckpt: PSCheckpoint) -> Path:
        """Write atomically; raises OSError (e.g. ENOSPC) with the previous checkpoints untouched."""
        arrays: dict[str, np.ndarray] = {"flat": ckpt.flat.reshape(-1)}
        skeleton = _split_arrays(ckpt.aggregator, arrays)
        metadata = {
            "format": _FORMAT,
            "version": str(ckpt.version),
            "manifest": json.dumps([[t.name, list(t.shape), t.dtype] for t in ckpt.manifest]),
            "aggregator": json.dumps(skeleton),
            "registry": json.dumps(ckpt.registry),
        }
        final = self.dir / f"ps-v{ckpt.version:012d}.safetensors"
        tmp = self.dir / f".{final.name}.tmp"
        try:
            write_safetensors(tmp, arrays, metadata)
            os.chmod(tmp, 0o600)
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._prune()
        return final

    @property
    def registry_path(self) -> Path:
        return self.dir / "registry.json"

    def save_registry(self, registry: dict) -> None:
        """Persist the credential registry (hashes only) on its own, atomically, after every change.

        Tokens are minted and consumed between model checkpoints; a PS killed in between must still
        know them, or the clients that hold them could never get back in.
        """
        tmp = self.dir / ".registry.json.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(registry, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.registry_path)
            _fsync_dir(self.dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def load_registry(self) -> dict | None:
        """The registry written by `save_registry`, or None if absent or unreadable."""
        try:
            return json.loads(self.registry_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.error("event=registry_unreadable path=%s error=%s", self.registry_path, exc)
            return None

    def files(self) -> list[Path]:
        """Checkpoint files, newest first."""
        found = [p for p in self.dir.iterdir() if _NAME.match(p.name)]
        return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)), reverse=True)

    def _prune(self) -> None:
        for old in self.files()[self.keep :]:
            old.unlink(missing_ok=True)

    def load_latest(self) -> PSCheckpoint | None:
        """The newest checkpoint that loads cleanly; corrupt files are skipped with a log line."""
        for path in self.files():
            try:
                return self.load(path)
            except Exception as exc:  # a torn or foreign file must not stop the PS from starting
                log.error("event=checkpoint_unreadable path=%s error=%s", path, exc)
        return None

    @staticmethod
    def load(path: Path) -> PSCheckpoint:
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
            if meta.get("format") != _FORMAT:
                raise ValueError("not a geofed PS checkpoint")
            flat = np.array(f.get_tensor("flat"), dtype=np.float32)
            aggregator = _join_arrays(json.loads(meta["aggregator"]), lambda k: np.array(f.get_tensor(k)))
        manifest = tuple(TensorEntry(n, tuple(s), d) for n, s, d in json.loads(meta["manifest"]))
        if sum(t.numel for t in manifest) != flat.size:
            raise ValueError("manifest does not match the stored model size")
        return PSCheckpoint(int(meta["version"]), flat, manifest, aggregator, json.loads(meta["registry"]))
