"""The shard map of a sharded parameter server: which slice of the flat vector each PS shard owns.

A federation with `ps_shards = N` splits the exchanged flat vector into N contiguous slices whose boundaries
fall on tensor boundaries of the manifest (so each shard's strategy state is made of whole tensors, and a
shard's checkpoint holds whole tensors). Clients learn the map at Join (and on every model transfer) and cut
their codec frames at its boundaries (`frame_ranges` with `cuts`), so the PS front can route each frame to
the one shard that owns it from the frame's prefix alone, without decoding it. Shared by PS and client; no
gRPC, no torch.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from geofed.manifest import Manifest, manifest_numel


class ShardMapError(ValueError):
    """The manifest cannot be split as asked, or a map is malformed; the message says why."""


@dataclass(frozen=True)
class ShardMap:
    """`bounds` = (0, b1, ..., numel): shard i owns elements [bounds[i], bounds[i + 1])."""

    bounds: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.bounds
        if len(b) < 2 or b[0] != 0 or any(x >= y for x, y in zip(b, b[1:], strict=False)):
            raise ShardMapError(f"shard bounds must start at 0 and strictly increase, got {list(b)[:8]}")

    @property
    def shards(self) -> int:
        return len(self.bounds) - 1

    @property
    def numel(self) -> int:
        return self.bounds[-1]

    @property
    def cuts(self) -> tuple[int, ...]:
        """Inner boundaries: where a frame must end."""
        return self.bounds[1:-1]

    def slice_of(self, index: int) -> tuple[int, int]:
        return self.bounds[index], self.bounds[index + 1]

    def owner(self, offset: int) -> int:
        """Index of the shard whose slice holds element `offset`."""
        if not 0 <= offset < self.numel:
            raise ShardMapError(f"element {offset} is outside the exchanged vector of {self.numel} elements")
        lo, hi = 0, self.shards
        while hi - lo > 1:  # bisect over the bounds
            mid = (lo + hi) // 2
            if self.bounds[mid] <= offset:
                lo = mid
            else:
                hi = mid
        return lo

    @property
    def digest(self) -> bytes:
        """What a client echoes in every push: a push cut for another map is refused, not misrouted."""
        return hashlib.sha256(struct.pack(f"<{len(self.bounds)}Q", *self.bounds)).digest()[:16]


def split_manifest(manifest: Manifest, shards: int) -> ShardMap:
    """N contiguous slices on tensor boundaries, each as close to numel / N as the tensors allow.

    Greedy over the running total: boundary i is the tensor boundary nearest to i·numel/N that keeps every
    slice non-empty. A model with fewer tensors than shards cannot be split (ShardMapError says so).
    """
    if shards < 1:
        raise ShardMapError(f"ps_shards must be at least 1, got {shards}")
    total = manifest_numel(manifest)
    ends, acc = [], 0
    for t in manifest:
        if t.numel:
            acc += t.numel
            ends.append(acc)  # candidate boundaries: the end of every non-empty tensor
    if len(ends) < shards:
        raise ShardMapError(f"the model has {len(ends)} non-empty tensors, too few for {shards} PS shards "
                            "(shard boundaries fall on tensor boundaries)")
    bounds, j = [0], 0
    for i in range(1, shards):
        target = total * i / shards
        # candidates that leave room for the shards still to come (one tensor each at least)
        last_allowed = len(ends) - (shards - i) - 1
        while j < last_allowed and abs(ends[j + 1] - target) <= abs(ends[j] - target):
            j += 1
        while ends[j] <= bounds[-1]:
            j += 1
        bounds.append(ends[j])
        j += 1
    bounds.append(total)
    return ShardMap(tuple(bounds))


def frame_ranges(numel: int, frame_elems: int, cuts: Sequence[int] = ()) -> Iterator[tuple[int, int]]:
    """[a, b) of each frame: the frame_elems grid from 0, additionally cut at every cut (a shard boundary).

    The one framing rule of a sharded federation's pushes: the client encodes by it, the front routes by
    it and each shard checks its frames against it.
    """
    points = sorted({*range(frame_elems, numel, frame_elems), *(c for c in cuts if 0 < c < numel)})
    a = 0
    for b in (*points, numel):
        if b > a:
            yield a, b
        a = b


def expected_frame_end(offset: int, frame_elems: int, slice_end: int) -> int:
    """Where the frame starting at `offset` must end, inside a slice ending at `slice_end`."""
    return min(slice_end, (offset // frame_elems + 1) * frame_elems)
