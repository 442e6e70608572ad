"""A site's push, slice-wise: every rank encodes its own slice, rank 0 relays the frames.

Each rank error-corrects and encodes its `FlatPartition` range with a `SliceCodec` (the ranks agree on
the header's global min/max and entropy table through `DistAgreement`), then hands its frames to rank
0 one at a time over the process group, as raw bytes (a length, then the bytes; nothing is pickled).
Rank 0, which alone holds the connection to the PS (paper §III), streams its own frames and then each
other rank's in rank order, which is flat-offset order: one stream the PS decodes as any other. No
rank holds more than its slice and one frame in flight; rank 0 never holds the whole delta.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

from geofed.codec import Codec, ErrorFeedback
from geofed.codec.base import DEFAULT_FRAME_ELEMS
from geofed.codec.sharded import SliceCodec

from ..fsdp import comm_device
from .partition import FlatPartition

_END = -1  # length sent after a rank's last frame


class DistAgreement:
    """`geofed.codec.sharded.Agreement` over the default process group (one all-reduce per call)."""

    def _reduce(self, values: np.ndarray, op: dist.ReduceOp) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(values)).to(comm_device())
        dist.all_reduce(t, op=op)
        return t.cpu().numpy()

    def max(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(values, dist.ReduceOp.MAX)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(values, dist.ReduceOp.SUM)


class _Alone:
    """The agreement of a single process: its own values."""

    def max(self, values: np.ndarray) -> np.ndarray:
        return values

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values


def encode_slice(codec: Codec, delta: torch.Tensor, part: FlatPartition, rank: int, ef: ErrorFeedback | None,
                 frame_elems: int = DEFAULT_FRAME_ELEMS, cuts: Sequence[int] = ()) -> tuple[bytes, Iterator[bytes]]:
    """This rank's slice of δ (+ its residual, staged in `ef`) as the stream header and its frames; collective.

    `cuts`: a sharded PS's shard bounds (global offsets), where frames must also end."""
    start, _ = part.range(rank)
    sliced = SliceCodec(codec, start, part.numel, DistAgreement() if part.world > 1 else _Alone())
    values = delta.numpy()
    cut = {"cuts": tuple(cuts)} if cuts else {}
    if ef is not None:
        return ef.encode(sliced, values, frame_elems=frame_elems, **cut)
    return sliced.encode(values, frame_elems=frame_elems, **cut)


def frames_to_leader(frames: Iterator[bytes], rank: int, world: int) -> Iterator[bytes] | None:
    """On rank 0: a lazy iterator of every rank's frames in rank order. Elsewhere: send this rank's frames
    to rank 0 as it reads them, and return None once they are all sent. Every rank must call it; rank 0
    must read its iterator to the end (its reads are what the other ranks' sends wait on)."""
    if world == 1:
        return frames
    if rank != 0:
        device = comm_device()
        for frame in frames:
            dist.send(torch.tensor([len(frame)], dtype=torch.int64, device=device), dst=0)
            dist.send(torch.frombuffer(bytearray(frame), dtype=torch.uint8).to(device), dst=0)
        dist.send(torch.tensor([_END], dtype=torch.int64, device=device), dst=0)
        return None
    return _relay(frames, world)


def _relay(own: Iterator[bytes], world: int) -> Iterator[bytes]:
    yield from own
    device = comm_device()
    size = torch.empty(1, dtype=torch.int64, device=device)
    for src in range(1, world):
        while True:
            dist.recv(size, src=src)
            n = int(size.item())
            if n == _END:
                break
            if n < 0:
                raise RuntimeError(f"rank {src} announced a frame of {n} bytes")
            buf = torch.empty(n, dtype=torch.uint8, device=device)
            dist.recv(buf, src=src)
            yield bytes(buf.cpu().numpy())
