"""How the front reaches its shards: the `ShardLink` interface, and `LocalLink` over in-process `ShardCore`s.

The gRPC link (`shard_grpc.GrpcLink`) and `LocalLink` (unit tests of the front's routing and commit logic,
without sockets) raise the same errors: `ShardUnavailable` when a shard cannot be reached, `ShardRefused`
when it refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geofed.manifest import Manifest

from .errors import ShardRefused, ShardUnavailable
from .shard import ShardCore


@dataclass(frozen=True)
class StagedSlice:
    """What a shard reports of one push's slice once it has decoded, checked and stored every frame."""

    sq_norm: float
    sketch: np.ndarray | None  # count sketch at the slice's global positions; None for Θ0


class StageCall(Protocol):
    """One push's frames on their way to one shard."""

    def send(self, frame: bytes) -> None: ...

    def finish(self) -> StagedSlice:
        """The slice's squared norm and sketch once the shard has decoded, checked and stored every frame."""

    def cancel(self) -> None: ...


class ShardLink(Protocol):
    shards: int

    def address(self, i: int) -> str: ...

    def describe(self, i: int) -> dict: ...

    def stage(self, i: int, push_id: str, codec_header: bytes, *, init: bool, lo: int, hi: int) -> StageCall: ...

    def fold(self, i: int, push_id: str, client_id: str, round_version: int, **kw) -> float: ...

    def drop(self, i: int, push_ids: list[str]) -> None: ...

    def install(self, i: int, push_id: str, version: int, manifest: Manifest) -> dict: ...

    def prepare(self, i: int, version: int, folded: int) -> tuple[bool, str, float]: ...

    def commit(self, i: int, version: int) -> dict: ...

    def abort(self, i: int, version: int) -> None: ...

    def sync(self, i: int, version: int, drop: list[str], keep: list[str] | None = None) -> dict: ...

    def read(self, i: int, version: int, offset: int) -> Iterator[bytes]: ...


class _LocalStage:
    def __init__(self, run: Callable[[list[bytes]], StagedSlice]) -> None:
        self.frames: list[bytes] = []
        self.run = run

    def send(self, frame: bytes) -> None:
        self.frames.append(frame)

    def finish(self) -> StagedSlice:
        return self.run(self.frames)

    def cancel(self) -> None:
        self.frames = []


class LocalLink:
    """In-process shards; `down` holds the indices that behave as unreachable (a killed shard)."""

    def __init__(self, shards: list[ShardCore]) -> None:
        self.cores = shards
        self.shards = len(shards)
        self.down: set[int] = set()

    def address(self, i: int) -> str:
        return f"local:{i}"

    def _core(self, i: int) -> ShardCore:
        if i in self.down:
            raise ShardUnavailable("shard_down", f"PS shard {i} is unreachable")
        return self.cores[i]

    def describe(self, i: int) -> dict:
        return self._core(i).state()

    def stage(self, i, push_id, codec_header, *, init, lo, hi):
        def run(frames: list[bytes]) -> StagedSlice:
            staged = self._core(i).stage(push_id, codec_header, frames, init=init, lo=lo, hi=hi)
            return StagedSlice(staged.sq_norm, staged.sketch)

        return _LocalStage(run)

    def fold(self, i, push_id, client_id, round_version, **kw) -> float:
        return self._core(i).fold(push_id, client_id, round_version, **kw)

    def drop(self, i, push_ids) -> None:
        self._core(i).drop(push_ids)

    def install(self, i, push_id, version, manifest) -> dict:
        self._core(i).install(push_id, version, manifest)
        return self._core(i).state()

    def prepare(self, i, version, folded):
        return self._core(i).prepare(version, folded)

    def commit(self, i, version) -> dict:
        self._core(i).commit(version)
        return self._core(i).state()

    def abort(self, i, version) -> None:
        self._core(i).abort(version)

    def sync(self, i, version, drop, keep=None) -> dict:
        self._core(i).sync(version, drop, keep)
        return self._core(i).state()

    def read(self, i, version, offset):
        snap = self._core(i).read(version)
        view = memoryview(snap.flat.reshape(-1).view("B"))
        step = 1 << 20
        for at in range(offset, len(view), step):
            yield bytes(view[at : at + step])


__all__ = ["LocalLink", "ShardLink", "ShardRefused", "ShardUnavailable", "StageCall", "StagedSlice"]
