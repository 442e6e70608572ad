"""One rank's slice state for the slice-wise sync: every rank keeps, diffs, error-corrects, encodes and
checkpoints only its own slice of the flat vector; rank 0 relays the frames to the PS.

The whole-vector path gathers the model on rank 0 for each delta and checkpoint, about seven full-size fp32
buffers on one rank (global model, delta, residual and its corrected copy, the checkpoint's flat model and
AdamW's gathered moments). Here each rank holds its `FlatPartition` range of the base model, the delta and
the residual (O(model / ranks)); rank 0 spools the frames as they arrive (`PSClient.prepare`, spilled to
disk past 64 MB), and checkpoints are written by every rank for its own shards (`slices.checkpoint`, DCP),
so a site relaunched on another number of ranks restores them. Rank 0 still receives the new global model
whole from the PS (one fp32 vector: the model stream is one connection, paper §III) and sends each rank
its range from it (`load_global_slices`).

Every method is collective: all ranks call it in the same order. Rank 0's network waits stay in
`Ranks.lead` (no collectives there), so the relay and the checkpoint happen before the push is sent.
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from geofed.codec import Codec, ErrorFeedback
from geofed.codec.base import DEFAULT_FRAME_ELEMS

from ...connection.upload import Upload, settle_residual
from ..checkpoint import CheckpointError, atomic_write
from ..flat import Select
from ..fsdp import is_distributed, reshard
from .checkpoint import load_sharded, read_pointer, save_sharded
from .partition import FlatPartition, gather_slice, load_global_slices
from .push import encode_slice, frames_to_leader

log = logging.getLogger("geofed.client")

SHARDED_CHECKPOINTS = "checkpoints-sharded"  # under the work dir; shared storage on a multi-node site
UPLOAD_FILE = "upload.bin"  # the encoded push saved with its checkpoint, resent after a preemption mid-push


def sharded_meta(work: Path) -> dict[str, Any] | None:
    """The meta of the site's newest sharded checkpoint (what rank 0 declares at Join), or None."""
    body = read_pointer(Path(work) / SHARDED_CHECKPOINTS)
    return None if body is None else body["meta"]


class SliceSync:
    """One rank's part of a slice-wise sync (see the module docstring)."""

    def __init__(self, work: Path, rank: int, world: int, numel: int, select: Select, *, block: int = 0,
                 error_feedback: bool = True, decay: float = 1.0, frame_elems: int = DEFAULT_FRAME_ELEMS) -> None:
        self.directory = Path(work) / SHARDED_CHECKPOINTS
        self.rank, self.world, self.select, self.frame_elems = rank, world, select, frame_elems
        self.part = FlatPartition.for_codec(numel, world, frame_elems, block)
        a, b = self.part.range(rank)
        self.ef = ErrorFeedback(b - a, decay) if error_feedback else None
        self.base: torch.Tensor | None = None  # this rank's range of the global model it trains from
        self.cuts: tuple[int, ...] = ()  # a sharded PS's shard bounds (from rank 0's Join), where frames also end

    def _reshard(self, model: nn.Module) -> None:
        if is_distributed():
            reshard(model)  # evaluation leaves the root unit unsharded; the slices read the shards

    def adopt(self, model: nn.Module, flat: np.ndarray | None) -> None:
        """Rank 0's global model (None elsewhere) into every rank's shards; each rank keeps its range."""
        self._reshard(model)
        tensor = _read_only_tensor(flat) if flat is not None else None
        # The published vector is never written: on one rank the kept base may alias it.
        self.base = load_global_slices(model, self.part, tensor, self.select)

    def delta(self, model: nn.Module) -> torch.Tensor:
        """δ = θ_local − θ_base over this rank's range (Algorithm 1, client side)."""
        if self.base is None:
            raise RuntimeError("no global model adopted yet")
        self._reshard(model)
        return gather_slice(model, self.part, self.select).sub_(self.base)

    def current(self, model: nn.Module) -> torch.Tensor:
        """This rank's range of the exchanged parameters as they are (the master's Θ0; a re-seed)."""
        self._reshard(model)
        return gather_slice(model, self.part, self.select)

    def encode(self, codec: Codec, values: torch.Tensor, spool: Callable | None, *, delta: bool = True) -> Any:
        """Encode this rank's `values`; rank 0 passes every rank's frames, in flat order, to
        `spool(header, frames)` and returns what it returns; None elsewhere.

        A `delta` is error-corrected with this rank's residual and framed for a sharded PS (`cuts`); the
        master's Θ0 (`delta=False`) is neither: the PS front cuts that one itself."""
        header, frames = encode_slice(codec, values, self.part, self.rank, self.ef if delta else None,
                                      self.frame_elems, self.cuts if delta else ())
        relayed = frames_to_leader(frames, self.rank, self.world)
        if relayed is None:
            return None
        if spool is None:
            raise RuntimeError("rank 0 must spool the relayed frames")
        return spool(header, relayed)

    def settle(self, status: str) -> None:
        """Move this rank's residual slice on by the push's outcome (`upload.settle_residual`)."""
        settle_residual(self.ef, status)

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict[str, Any],
             upload: Upload | None) -> Path:
        """Checkpoint every rank's shards, residual slice and (rank 0) the upload about to be sent."""
        self._reshard(model)
        if self.rank == 0:
            meta = {**meta, "upload": None}
            if upload is not None:  # copied from its spool in chunks: never the whole payload in memory
                atomic_write(self.directory / UPLOAD_FILE, partial(_write_upload, upload=upload))
                meta["upload"] = UPLOAD_FILE
        return save_sharded(self.directory, step, model, optimizer, self.part, self.ef, meta)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """Restore the newest sharded checkpoint on this rank count; its meta, or None if there is none."""
        self._reshard(model)
        meta = load_sharded(self.directory, model, optimizer, self.part, self.ef)
        if meta is not None:
            log.info("event=sharded_checkpoint_restored rank=%d world=%d step=%s base_version=%s", self.rank,
                     self.world, meta.get("step"), meta.get("base_version"))
        return meta

    def saved_upload(self, meta: dict[str, Any]) -> tuple[bytes, bytes] | None:
        """The upload the checkpoint was written with (rank 0), if it was saved."""
        if not meta.get("upload"):
            return None
        return _read_upload(self.directory / meta["upload"])


def _write_upload(f, upload: Upload) -> None:
    header = upload.header.SerializeToString()
    upload.spool.seek(0, 2)
    size = upload.spool.tell()
    f.write(json.dumps({"header": len(header), "payload": size}).encode() + b"\n")
    f.write(header)
    upload.spool.seek(0)
    shutil.copyfileobj(upload.spool, f, 1 << 20)


def _read_only_tensor(flat: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():  # a published model vector is read-only; it is only ever read here
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.asarray(flat, dtype=np.float32))


def _read_upload(path: Path) -> tuple[bytes, bytes]:
    try:
        with open(path, "rb") as f:
            sizes = json.loads(f.readline())
            header, payload = f.read(sizes["header"]), f.read(sizes["payload"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path} is not a readable saved upload: {exc}") from None
    if len(header) != sizes["header"] or len(payload) != sizes["payload"]:
        raise CheckpointError(f"{path} is truncated: {len(header)}+{len(payload)} bytes of "
                              f"{sizes['header']}+{sizes['payload']}")
    return header, payload
