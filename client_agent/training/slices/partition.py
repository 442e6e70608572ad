"""Each rank's own contiguous slice of the flat vector, moved to and from its FSDP shards.

The flat vector (`client_agent.training.flat`, manifest order) is cut into one contiguous, frame-aligned range
per rank (`FlatPartition`): rank r encodes, error-corrects and checkpoints only its range, and the
codec's frames, which carry their flat offsets (`geofed.codec.header`), come out already in stream
order when the ranks' frames are sent in rank order. FSDP2 shards each parameter by rows instead
(`Shard(0)`), so a parameter's rows usually live on other ranks than its part of the flat range:
`gather_slice` and `scatter_slice` move them with one `all_to_all_single` per parameter, each rank
sending exactly the elements another rank owns. No rank ever holds more than its shards, its slice
and one parameter's local rows (paper §III: the client is an FSDP worker group), so per-rank memory is
O(model / ranks + one frame).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..flat import Select, selected
from ..fsdp import comm_device

Range = tuple[int, int]


@dataclass(frozen=True)
class FlatPartition:
    """Rank r owns elements [starts[r], starts[r + 1]) of a flat vector of `numel` elements.

    Boundaries are multiples of `align` (the codec frame, or its lcm with the per-block range size),
    so every frame lies in one rank's slice; ranks get near-equal numbers of aligned units, the first
    ones one more when they do not divide evenly, and a rank may own nothing when units < ranks.
    """

    numel: int
    world: int
    align: int

    def __post_init__(self) -> None:
        if self.numel < 0 or self.world < 1 or self.align < 1:
            raise ValueError(f"need numel >= 0, world >= 1, align >= 1; got {self.numel}, {self.world}, {self.align}")

    @classmethod
    def for_codec(cls, numel: int, world: int, frame_elems: int, block: int = 0) -> FlatPartition:
        """Aligned to whole frames and, with per-block ranges, whole blocks (their ranges travel per frame)."""
        return cls(numel, world, math.lcm(frame_elems, block) if block else frame_elems)

    def range(self, rank: int) -> Range:
        units = -(-self.numel // self.align)
        base, extra = divmod(units, self.world)

        def start(r: int) -> int:
            return min(self.numel, (r * base + min(r, extra)) * self.align)

        return start(rank), start(rank + 1)

    def ranges(self) -> list[Range]:
        return [self.range(r) for r in range(self.world)]


def _overlap(a: Range, b: Range) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _row_ranges(rows: int, world: int) -> list[Range]:
    """FSDP2's `Shard(0)` rows per rank: torch.chunk's split (ceil(rows / world) each, the last ones short)."""
    per = -(-rows // world) if rows else 0
    return [(min(rows, r * per), min(rows, (r + 1) * per)) for r in range(world)]


def _local(param: torch.Tensor) -> torch.Tensor:
    return param.to_local() if hasattr(param, "to_local") else param


def param_ranges(model: nn.Module, select: Select | None, world: int) -> list[tuple[str, torch.Tensor, list[Range]]]:
    """(name, parameter, flat range held by each rank) in manifest order, checked against this rank's shard."""
    rank = dist.get_rank() if world > 1 else 0
    out, offset = [], 0
    for name, param in selected(model, select):
        n = param.numel()
        if world == 1:
            held = [(offset, offset + n)]
        elif not hasattr(param, "to_local"):
            raise RuntimeError(f"{name} is not sharded by FSDP (client_agent.training.fsdp.shard_model first)")
        else:
            rows = param.shape[0] if param.dim() else 1
            row = n // rows if rows else 0
            held = [(offset + a * row, offset + b * row) for a, b in _row_ranges(rows, world)]
            mine = _local(param).numel()
            if mine != held[rank][1] - held[rank][0]:
                raise RuntimeError(f"{name}: this rank holds {mine} elements, FSDP's Shard(0) split says "
                                   f"{held[rank][1] - held[rank][0]}; unsupported sharding")
        out.append((name, param, held))
        offset += n
    return out


def _splits(mine: Range, others: Sequence[Range]) -> list[int]:
    return [_overlap(mine, o) for o in others]


@torch.no_grad()
def _exchange(send: torch.Tensor, send_from: Range, send_to: Sequence[Range],
              recv: torch.Tensor, recv_into: Range, recv_from: Sequence[Range]) -> None:
    """Elements [send_from) of the flat vector (held in `send`) go to the ranks owning them (`send_to`);
    `recv` (elements [recv_into)) is filled from the ranks holding them (`recv_from`). Collective.

    Both sides' pieces are contiguous and in rank order, because every rank's ranges are ordered."""
    in_splits, out_splits = _splits(send_from, send_to), _splits(recv_into, recv_from)
    lo = max(recv_into[0], min((r[0] for r, s in zip(recv_from, out_splits, strict=True) if s), default=0))
    view = recv[lo - recv_into[0] : lo - recv_into[0] + sum(out_splits)]
    lo_send = max(send_from[0], min((r[0] for r, s in zip(send_to, in_splits, strict=True) if s), default=0))
    piece = send[lo_send - send_from[0] : lo_send - send_from[0] + sum(in_splits)]
    device = comm_device()
    if device.type == "cpu":
        dist.all_to_all_single(view, piece.contiguous(), out_splits, in_splits)
        return
    got = torch.empty(view.shape, dtype=view.dtype, device=device)
    dist.all_to_all_single(got, piece.to(device), out_splits, in_splits)
    view.copy_(got)


def exchange(values: torch.Tensor, held: Sequence[Range], out: torch.Tensor, wanted: Sequence[Range]) -> None:
    """Re-partition a flat vector: this rank holds `values` = elements held[rank] and receives `out` =
    elements wanted[rank] (both lists tile the vector in rank order); collective."""
    rank = dist.get_rank()
    _exchange(values, held[rank], wanted, out, wanted[rank], held)


@torch.no_grad()
def gather_slice(model: nn.Module, part: FlatPartition, select: Select | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """This rank's range of the flat fp32 vector of the exchanged parameters, from every rank's shards."""
    rank = dist.get_rank() if part.world > 1 else 0
    mine = part.range(rank)
    out = torch.empty(mine[1] - mine[0], dtype=torch.float32) if out is None else out
    if out.shape != (mine[1] - mine[0],) or out.dtype != torch.float32:
        raise ValueError(f"out must be float32 of shape ({mine[1] - mine[0]},), got {out.dtype} {tuple(out.shape)}")
    owners = part.ranges()
    for _, param, held in param_ranges(model, select, part.world):
        local = _local(param.detach()).reshape(-1).to(torch.float32)
        if part.world == 1:
            out[held[0][0] : held[0][1]].copy_(local)
        else:
            _exchange(local, held[rank], owners, out, mine, held)
    return out


@torch.no_grad()
def scatter_slice(model: nn.Module, part: FlatPartition, values: torch.Tensor, select: Select | None = None) -> None:
    """Write this rank's range of a flat vector (`values`) into every rank's shards; collective."""
    rank = dist.get_rank() if part.world > 1 else 0
    mine = part.range(rank)
    if values.shape != (mine[1] - mine[0],):
        raise ValueError(f"rank {rank} owns {mine[1] - mine[0]} elements of the flat vector, got {tuple(values.shape)}")
    owners = part.ranges()
    values = values.to(torch.float32)
    for _, param, held in param_ranges(model, select, part.world):
        local = _local(param.detach())
        buf = torch.empty(local.numel(), dtype=torch.float32)
        if part.world == 1:
            buf.copy_(values[held[0][0] : held[0][1]])
        else:
            _exchange(values, mine, held, buf, held[rank], owners)
        local.copy_(buf.view(local.shape))


@torch.no_grad()
def load_global_slices(model: nn.Module, part: FlatPartition, flat: torch.Tensor | None,
                       select: Select | None = None) -> torch.Tensor:
    """Rank 0's global vector, each rank receiving only its own range (kept as its delta base, returned)
    and writing it into every rank's shards; collective. No rank but 0 ever holds the whole vector."""
    rank = dist.get_rank() if part.world > 1 else 0
    a, b = part.range(rank)
    if rank == 0 and (flat is None or flat.shape != (part.numel,)):
        raise ValueError(f"rank 0 needs a 1-D flat vector of {part.numel} elements, "
                         f"got {None if flat is None else tuple(flat.shape)}")
    if part.world == 1:
        mine = flat.to(torch.float32)
    elif rank == 0:
        device = comm_device()
        for r in range(1, part.world):
            ra, rb = part.range(r)
            if rb > ra:
                dist.send(flat[ra:rb].to(device=device, dtype=torch.float32).contiguous(), dst=r)
        mine = flat[a:b].to(torch.float32).clone()
    else:
        got = torch.empty(b - a, dtype=torch.float32, device=comm_device())
        if b > a:
            dist.recv(got, src=0)
        mine = got.cpu()
    scatter_slice(model, part, mine, select)
    return mine
