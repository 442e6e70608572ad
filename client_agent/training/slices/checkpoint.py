"""Sharded client checkpoints (paper §III-B4): every rank writes its own part, any rank count reads.

`torch.distributed.checkpoint` (DCP) writes the FSDP-sharded model, AdamW's sharded moments and the
error-feedback residual, each rank its own shards, so no rank gathers a full-size buffer to save; on
load DCP reads each rank's new shards from whichever files hold them, so a checkpoint written on N ranks
restores on M. The residual lives in the push's frame-aligned `FlatPartition`, which depends on the
rank count, so it is saved as a 1-D `Shard(0)` DTensor (torch.chunk's split, which DCP reshards) and
moved between the two layouts with one all-to-all. The rest (step, data position, scaler, base
version) is JSON written by rank 0. A save goes to its own `step-<n>-<serial>` directory; `latest.json`, replaced
atomically once every rank has finished, names the complete one, so a crash mid-save leaves the
previous checkpoint in force. DCP's own metadata file is pickled by torch: it is written and read only
by this site's ranks, never received from a peer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from geofed.codec import ErrorFeedback

from ..checkpoint import CheckpointError, atomic_write
from .partition import FlatPartition, Range, exchange

POINTER = "latest.json"
FORMAT = "geofed-sharded-1"


def _world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def chunk_ranges(numel: int, world: int) -> list[Range]:
    """DTensor's `Shard(0)` split of a 1-D vector: ceil(numel / world) elements per rank, the last ones short."""
    per = -(-numel // world)
    return [(min(numel, r * per), min(numel, (r + 1) * per)) for r in range(world)]


def _as_saved_layout(values: torch.Tensor, part: FlatPartition) -> torch.Tensor:
    """This rank's frame-partition slice, moved to the `Shard(0)` layout and wrapped as a DTensor."""
    rank, world = _world()
    if world == 1:
        return values
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    chunks = chunk_ranges(part.numel, world)
    a, b = chunks[rank]
    out = torch.empty(b - a, dtype=torch.float32)
    exchange(values, part.ranges(), out, chunks)
    mesh = init_device_mesh("cpu", (world,))
    return DTensor.from_local(out, mesh, [Shard(0)], run_check=False, shape=(part.numel,), stride=(1,))


def _blank(part: FlatPartition) -> torch.Tensor:
    """An uninitialised residual in the saved layout, for DCP to load into."""
    rank, world = _world()
    if world == 1:
        return torch.empty(part.numel, dtype=torch.float32)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    a, b = chunk_ranges(part.numel, world)[rank]
    mesh = init_device_mesh("cpu", (world,))
    return DTensor.from_local(torch.empty(b - a), mesh, [Shard(0)], run_check=False, shape=(part.numel,),
                              stride=(1,))


def _from_saved_layout(loaded: torch.Tensor, part: FlatPartition) -> torch.Tensor:
    rank, world = _world()
    if world == 1:
        return loaded
    a, b = part.range(rank)
    out = torch.empty(b - a, dtype=torch.float32)
    exchange(loaded.to_local(), chunk_ranges(part.numel, world), out, part.ranges())
    return out


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}


def save_sharded(directory: str | Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                 part: FlatPartition, ef: ErrorFeedback | None, meta: dict[str, Any]) -> Path:
    """Write this rank's shards of the model, optimizer and residual under `directory/step-<step>-<serial>`;
    collective.

    `meta` (JSON-able: step, data position, scaler, base version...) is written by rank 0 alone."""
    directory = Path(directory)
    rank, world = _world()
    # A fresh directory name every save, even for a step saved before (a round retried after a refusal):
    # the one the pointer names is never written over. Every rank reads the same pointer (shared storage).
    previous = read_pointer(directory)
    target = directory / f"step-{step}-{previous['serial'] + 1 if previous else 0}"
    state = _state(model, optimizer)
    residual = {}
    if ef is not None:
        residual["residual"] = _as_saved_layout(torch.from_numpy(ef.residual), part)
        if ef.staged is not None:
            residual["staged"] = _as_saved_layout(torch.from_numpy(ef.staged), part)
    state["ef"] = residual
    if rank == 0 and target.exists():
        shutil.rmtree(target)  # a save of this step that never completed (its pointer was never written)
    if world > 1:
        dist.barrier()
    import torch.distributed.checkpoint as dcp  # here, not at the top: 0.3-0.6 s a rejoining client never needs

    dcp.save(state, checkpoint_id=target)
    if world > 1:
        dist.barrier()  # every rank's files are complete before the pointer names them
    if rank == 0:
        body = {"format": FORMAT, "dir": target.name, "serial": previous["serial"] + 1 if previous else 0,
                "world": world, "numel": part.numel,
                "residual": sorted(residual), "meta": meta}
        atomic_write(directory / POINTER, lambda f: f.write(json.dumps(body).encode()))
        for old in directory.glob("step-*"):
            if old != target and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    return target


def read_pointer(directory: str | Path) -> dict[str, Any] | None:
    """What `latest.json` says (None on a first start); CheckpointError if it is unreadable or foreign."""
    path = Path(directory) / POINTER
    if not path.exists():
        return None
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a readable sharded-checkpoint pointer: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {body.get('format') if isinstance(body, dict) else body!r} "
                              f"is not {FORMAT}")
    if not isinstance(body.get("serial"), int) or not isinstance(body.get("dir"), str) or "/" in body["dir"]:
        raise CheckpointError(f"{path}: malformed pointer (serial {body.get('serial')!r}, dir {body.get('dir')!r})")
    return body


def load_sharded(directory: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                 part: FlatPartition, ef: ErrorFeedback | None) -> dict[str, Any] | None:
    """Restore what `save_sharded` wrote, on any number of ranks; the saved `meta`, or None if there is none.

    Every rank reads the pointer itself (on a multi-node site the directory must be shared storage)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    directory = Path(directory)
    body = read_pointer(directory)
    if body is None:
        return None
    if not (directory / body["dir"]).is_dir():
        raise CheckpointError(f"{directory / POINTER} names {body['dir']!r}, which is not there")
    if body["numel"] != part.numel:
        raise CheckpointError(f"{directory}: the checkpoint's flat vector has {body['numel']} elements, "
                              f"this model's {part.numel}")
    state = _state(model, optimizer)
    keys = body["residual"] if ef is not None else []  # error feedback switched off since: not read
    blank = {k: _blank(part) for k in keys}
    state["ef"] = blank
    import torch.distributed.checkpoint as dcp  # (see save_sharded)

    dcp.load(state, checkpoint_id=directory / body["dir"])
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optimizer"])
    if ef is not None and keys:
        ef.load_state_dict({k: _from_saved_layout(v, part) for k, v in blank.items()})
    return body["meta"]
