"""Rank-0-leads coordination of a `torchrun` client (several GPUs of one site); no-ops for one process.

Only rank 0 talks to the PS (paper §III: the client is an FSDP worker group behind one connection).
Settings and decisions travel from rank 0 as tensors: nothing is pickled between ranks here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .checkpoint import ClientCheckpoint
from .flat import Select, delta_, flatten, load_flat_
from .fsdp import broadcast_flat_from_rank0, full_flat_on_rank0, init_distributed, local_device
from .leader_wait import leader_wait

T = TypeVar("T")
# Checkpoint parts only rank 0 uses: the model and residual it pushes from, the optimizer state it
# broadcasts shard by shard while loading, the upload it resends ("private" is broadcast separately).
LEADER_ONLY = ("model", "optimizer", "residual", "upload", "private")


class Ranks:
    """This process's place in its site's process group."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self.rank, self.world = init_distributed(timeout_s=timeout_s)
        # How often waiting ranks hear from rank 0 during its network waits: well inside the timeout.
        self.poll_s = min(5.0, (timeout_s or 600.0) / 4)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def device(self, requested: torch.device) -> torch.device:
        return local_device() if self.distributed else requested

    def _bcast(self, t: torch.Tensor) -> torch.Tensor:
        if dist.get_backend() == "nccl":
            t = t.to(local_device())
            dist.broadcast(t, src=0)
            return t.cpu()
        dist.broadcast(t, src=0)
        return t

    def bcast_text(self, text: str | None) -> str:
        """Rank 0's string on every rank."""
        if not self.distributed:
            assert text is not None
            return text
        data = text.encode() if self.leader and text is not None else b""
        size = self._bcast(torch.tensor([len(data)], dtype=torch.int64))
        if self.leader:
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        else:
            buf = torch.empty(int(size), dtype=torch.uint8)
        return bytes(self._bcast(buf).numpy()).decode()

    def lead(self, work: Callable[[], T]) -> T | None:
        """Run rank 0's network work (no collectives in it) while the other ranks wait; its result on rank 0,
        None elsewhere. The wait may outlast the process-group timeout (`leader_wait`)."""
        return leader_wait(work, leader=self.leader, bcast=self._bcast if self.distributed else None,
                           poll_s=self.poll_s)

    def share_resume(self, ckpt: ClientCheckpoint | None) -> ClientCheckpoint | None:
        """Rank 0's checkpoint on every rank, which never reads the file (on a multi-node site it is on rank
        0's node only): step, data position, scaler and the rest as JSON, the private tensors broadcast;
        the parts only rank 0 uses (`LEADER_ONLY`) stay empty elsewhere."""
        if not self.distributed:
            return ckpt
        meta = None
        if self.leader and ckpt is not None:
            meta = {f.name: getattr(ckpt, f.name) for f in dataclasses.fields(ckpt) if f.name not in LEADER_ONLY}
            meta["private"] = {n: [list(t.shape), str(t.dtype).removeprefix("torch.")] for n, t in ckpt.private.items()}
        meta = json.loads(self.bcast_text(json.dumps(meta)))
        if meta is None:
            return None
        private = {}
        for name, (shape, dtype) in meta.pop("private").items():
            mine = ckpt.private[name].contiguous() if self.leader else torch.empty(shape, dtype=getattr(torch, dtype))
            private[name] = self._bcast(mine)
        return ckpt if self.leader else ClientCheckpoint(model=torch.empty(0), optimizer={}, private=private, **meta)

    def bcast_flag(self, value: bool | None) -> bool:
        """Rank 0's decision on every rank."""
        if not self.distributed:
            return bool(value)
        t = torch.tensor([1 if (self.leader and value) else 0], dtype=torch.int64)
        return bool(self._bcast(t).item())

    def load_global(self, model: nn.Module, flat: np.ndarray | torch.Tensor | None, select: Select) -> None:
        """Load rank 0's global model into every rank's (sharded) parameters."""
        tensor = torch.as_tensor(flat) if flat is not None else None
        if self.distributed:
            broadcast_flat_from_rank0(model, tensor, select)
        else:
            load_flat_(model, tensor, select)

    def full_flat(self, model: nn.Module, select: Select) -> torch.Tensor | None:
        """The full exchanged parameters as one flat fp32 vector on rank 0 (collective under FSDP)."""
        return full_flat_on_rank0(model, select) if self.distributed else flatten(model, select)

    def delta(
        self, out: torch.Tensor | None, model: nn.Module, base: np.ndarray | None, select: Select
    ) -> torch.Tensor | None:
        """δ = θ_local − θ_base into `out` on rank 0 (Algorithm 1); None on other ranks."""
        if not self.distributed:
            return delta_(out, model, torch.from_numpy(base), select)
        full = full_flat_on_rank0(model, select)
        if full is None:
            return None
        torch.sub(full, torch.from_numpy(base), out=out)
        return out
