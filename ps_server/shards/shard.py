"""One PS shard: its slice of the global vector, the strategy over it, and the two-phase apply.

The front drives it; nothing here decides *when* a round closes or whether a push is admitted. A push
arrives as the frames of this slice (`stage`), is decoded and checked (finite, this slice's squared norm
reported back so the front can bound the whole delta's norm, paper §III-B3), and is written to
disk before the front is told so. The front then `fold`s it with the factors it computed (norm bound,
staleness); the staged file stays until the round it went into is committed, so a shard killed mid-round
is restarted from its last committed slice and the front replays the open round's folds from those files:
nothing the front accepted is lost.

Publishing is two-phase: `prepare(v)` closes the round, applies the outer step and writes the slice of v
durably (next to, not over, the committed one); `commit(v)` makes it the committed slice; `abort(v)`
drops it (and reloads the strategy state the apply moved). A shard restarted between the two keeps the
prepared file: `sync(v)` with the front's committed version promotes or discards it. Plain numpy, no gRPC.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geofed.codec import CodecError
from geofed.codec.header import parse_header
from geofed.config import FederationConfig
from geofed.manifest import Manifest

from ..aggregation.displacement import DeltaSketch
from ..aggregation.guard import all_finite
from ..aggregation.norm_bound import BoundedPayload
from ..aggregation.reducer import empty_round
from ..aggregation.rounds import Admission
from ..aggregation.strategies import build_strategy
from ..aggregation.strategy import Accumulator
from ..checkpoint import CheckpointStore, PSCheckpoint
from ..global_model import GlobalModel, Snapshot
from ..ingest import KEPT_DECODED_BYTES, _Budget  # the ingest's own keep-decoded budget, split among shards here
from .errors import ShardRefused
from .slice_decoder import SliceDecoder

log = logging.getLogger("geofed.ps.shard")

_LEN = struct.Struct("<I")


@dataclass
class StagedPush:
    """A push's frames for this slice, decoded once to validate them, kept on disk until committed."""

    push_id: str
    path: Path
    init: bool
    sq_norm: float
    values: np.ndarray | None = None  # kept decoded while the shard's budget allows
    sketch: np.ndarray | None = None  # count sketch of the slice at its global positions (a delta's, not Θ0's)
    budget: _Budget | None = None

    def release(self) -> None:
        if self.values is not None and self.budget is not None:
            self.budget.give(self.values.nbytes)
        self.values = None


@dataclass
class FoldedPayload:
    """A staged push as the strategy folds it: the whole push's norm, this slice's values (local offsets)."""

    client_id: str
    norm: float
    numel: int
    staged: StagedPush
    lo: int
    hi: int
    total: int
    header: object = None  # the push's header stays at the front; no whole-vector strategy reads it here

    def iter_values(self, max_numel: int):
        if self.staged.values is not None:
            yield 0, self.staged.values
            return
        yield from read_staged(self.staged.path, self.lo, self.hi, self.total)


def read_staged(path: Path, lo: int, hi: int, total: int):
    """Decode a staged file again (header, then length-prefixed frames) into (local offset, values)."""
    with open(path, "rb") as f:
        (n,) = _LEN.unpack(f.read(_LEN.size))
        dec = SliceDecoder(f.read(n), lo=lo, hi=hi, numel=total)
        while head := f.read(_LEN.size):
            (n,) = _LEN.unpack(head)
            yield dec.feed(f.read(n))
        dec.finish()


def sq_norm(flat: np.ndarray, step: int = 1 << 22) -> float:
    """Σ x² in float64, slice by slice (a whole float64 copy would double the shard's peak memory)."""
    total = 0.0
    for i in range(0, flat.size, step):
        wide = flat[i : i + step].astype(np.float64)
        total += float(np.dot(wide, wide))
    return total


def slice_manifest(manifest: Manifest, lo: int, hi: int) -> Manifest:
    """The tensors that make up [lo, hi); the shard map puts its bounds on tensor boundaries."""
    out, at = [], 0
    for t in manifest:
        if lo <= at and at + t.numel <= hi:
            out.append(t)
        elif at < hi and at + t.numel > lo:
            raise ShardRefused("slice", f"tensor {t.name} [{at}, {at + t.numel}) straddles the slice [{lo}, {hi})")
        at += t.numel
    return tuple(out)


class ShardCore:
    """Shard `index` of a sharded PS; thread-safe (one lock around state changes)."""

    def __init__(self, fed: FederationConfig, index: int, checkpoint_dir: str | os.PathLike) -> None:
        self.fed, self.index = fed, index
        self.instance = secrets.token_hex(8)
        self.dir = Path(checkpoint_dir)
        self.store = CheckpointStore(self.dir, keep=2)
        self.prepared_dir, self.staged_dir = self.dir / "prepared", self.dir / "staged"
        for d in (self.prepared_dir, self.staged_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.strategy = build_strategy(fed)
        self.model = GlobalModel()
        self.lock = threading.RLock()
        self.lo = self.hi = self.total = 0
        self.staged: dict[str, StagedPush] = {}
        self.acc: Accumulator | None = None
        self.folded: list[str] = []  # push ids in the open round, in fold order
        self.prepared: tuple[int, np.ndarray, float] | None = None  # (version, slice, sq_norm)
        # Decoded pushes kept in RAM (folded without a second decode): the single PS's budget
        # (ingest.KEPT_DECODED) in proportion to this shard's part of the model, and at most one slice, so the
        # shards together keep what one PS keeps and a shard's memory is the single PS's divided by N.
        self.kept: _Budget | None = None

    # ---- durability -------------------------------------------------------------------------------

    def resume(self) -> None:
        """The newest committed slice, and the staged pushes still on disk (the front replays their folds)."""
        ckpt = self.store.load_latest()
        if ckpt is not None:
            self._adopt_checkpoint(ckpt)
        for path in sorted(self.staged_dir.glob("*.bin")):
            meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else None
            if meta is None:  # died between the frames and their record: never reported staged, drop it
                path.unlink(missing_ok=True)
                continue
            self.staged[meta["push_id"]] = StagedPush(meta["push_id"], path, meta["init"], meta["sq_norm"])
        log.info("event=shard_resume index=%d version=%d slice=%d:%d staged=%d", self.index, self.model.version,
                 self.lo, self.hi, len(self.staged))

    def _adopt_checkpoint(self, ckpt: PSCheckpoint) -> None:
        agg = ckpt.aggregator
        self.lo, self.hi, self.total = int(agg["lo"]), int(agg["hi"]), int(agg["total"])
        self.strategy.install(ckpt.flat.size, ckpt.manifest)
        if agg.get("strategy"):
            self.strategy.load_state_dict(agg["strategy"])
        self.model.publish(ckpt.version, ckpt.flat, ckpt.manifest)

    def _checkpoint(self, version: int, flat: np.ndarray, manifest: Manifest, directory: Path) -> Path:
        state = {"lo": self.lo, "hi": self.hi, "total": self.total, "index": self.index,
                 "strategy": self.strategy.state_dict()}
        store = self.store if directory == self.dir else CheckpointStore(directory, keep=1)
        return store.save(PSCheckpoint(version, flat, manifest, state, {}))

    # ---- pushes -----------------------------------------------------------------------------------

    def check_slice(self, lo: int, hi: int) -> None:
        if self.model.current() is not None and (lo, hi) != (self.lo, self.hi):
            raise ShardRefused("slice", f"shard {self.index} owns [{self.lo}, {self.hi}), not [{lo}, {hi}): "
                               "the front's shard map differs from this shard's")

    def stage(self, push_id: str, codec_header: bytes, frames, *, init: bool, lo: int, hi: int) -> StagedPush:
        """Decode and check this slice's frames, write them to disk; the push's squared norm over the slice."""
        if not push_id or "/" in push_id or len(push_id) > 200:
            raise ShardRefused("unknown_push", "push id must be 1..200 characters without '/'")
        if init:
            if self.model.current() is not None:
                raise ShardRefused("version", f"shard {self.index} already holds a model (version "
                                   f"{self.model.version}); an initial model is refused")
            try:
                total = parse_header(codec_header).numel  # Θ0's header names the whole vector's size
            except CodecError as exc:
                raise ShardRefused("codec", f"codec header: {exc}") from exc
            if not 0 <= lo < hi <= total:
                raise ShardRefused("slice", f"slice [{lo}, {hi}) is not inside a vector of {total} elements")
        else:
            if self.model.current() is None:
                raise ShardRefused("version", f"shard {self.index} holds no model yet")
            self.check_slice(lo, hi)
            total = self.total
        dec = SliceDecoder(codec_header, lo=lo, hi=hi, numel=total)
        path = self.staged_dir / f"{push_id}.bin"
        if self.kept is None:
            self.kept = _Budget(min(4 * (hi - lo), KEPT_DECODED_BYTES * (hi - lo) // max(1, total)))
        kept = self.kept
        values = np.empty(hi - lo, np.float32) if kept.take(4 * (hi - lo)) else None
        sq = 0.0
        sketch = None if init else DeltaSketch()  # the front sums the shards' into the whole delta's
        try:
            with open(path, "wb") as f:
                f.write(_LEN.pack(len(codec_header)) + codec_header)
                for frame in frames:
                    off, v = dec.feed(frame)
                    if not np.isfinite(v).all():
                        bad = int(np.flatnonzero(~np.isfinite(v))[0]) + off + lo
                        raise ShardRefused("nonfinite", f"non-finite value (NaN/Inf) at element {bad}")
                    wide = v.astype(np.float64)
                    sq += float(np.dot(wide, wide))
                    if sketch is not None:
                        sketch.add(wide, lo + off)
                    if values is not None:
                        values[off : off + v.size] = v
                    f.write(_LEN.pack(len(frame)))
                    f.write(frame)
                dec.finish()
                f.flush()
                os.fsync(f.fileno())
            if not math.isfinite(sq):
                raise ShardRefused("nonfinite", "delta norm overflows float")
            meta = {"push_id": push_id, "init": init, "sq_norm": sq}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, path.with_suffix(".json"))
        except BaseException:
            path.unlink(missing_ok=True)
            if values is not None:
                kept.give(values.nbytes)
            raise
        staged = StagedPush(push_id, path, init, sq, values, sketch=sketch.values if sketch is not None else None,
                            budget=kept)
        with self.lock:
            old = self.staged.pop(push_id, None)
            if old is not None:
                old.release()
            self.staged[push_id] = staged
            if init:
                self.lo, self.hi, self.total = lo, hi, total
        return staged

    def _staged(self, push_id: str) -> StagedPush:
        staged = self.staged.get(push_id)
        if staged is None:
            raise ShardRefused("unknown_push", f"shard {self.index} holds no staged push {push_id!r}")
        return staged

    def drop(self, push_ids: list[str]) -> None:
        """Forget staged pushes that were never folded (the front refused them after staging)."""
        with self.lock:
            for push_id in push_ids:
                if push_id in self.folded:
                    continue
                staged = self.staged.pop(push_id, None)
                if staged is not None:
                    self._delete(staged)

    def _delete(self, staged: StagedPush) -> None:
        staged.release()
        staged.path.unlink(missing_ok=True)
        staged.path.with_suffix(".json").unlink(missing_ok=True)

    def install(self, push_id: str, version: int, manifest: Manifest) -> Snapshot:
        """Adopt a staged init push as this slice's model at `version` (durable before it answers)."""
        with self.lock:
            if self.model.current() is not None:
                if self.model.version == version:
                    return self.model.current()
                raise ShardRefused("version", f"shard {self.index} already holds version {self.model.version}")
            staged = self._staged(push_id)
            part = slice_manifest(manifest, self.lo, self.hi)
            if staged.values is not None:  # decoded while it arrived: that buffer becomes the slice
                flat, staged.values = staged.values, None
                staged.budget.give(flat.nbytes)
            else:
                flat = np.empty(self.hi - self.lo, np.float32)
                for off, values in FoldedPayload("", 0.0, flat.size, staged, self.lo, self.hi,
                                                 self.total).iter_values(0):
                    flat[off : off + values.size] = values
            self.strategy.install(flat.size, part)
            self._checkpoint(version, flat, part, self.dir)
            self._delete(self.staged.pop(push_id))
            return self.model.publish(version, flat, part)

    def fold(self, push_id: str, client_id: str, round_version: int, *, scale: float, norm: float,
             staleness: int, factor: float, num_tokens: int, local_steps: int, position: int) -> float:
        """Fold a staged push into the open round with the front's factors; the weight the strategy gave it.

        `position`: how many pushes the front folded into this round before it. A shard that counts
        otherwise (it restarted and lost its round) refuses, and the front replays the round."""
        with self.lock:
            if position != len(self.folded):
                raise ShardRefused("replay", f"shard {self.index} holds {len(self.folded)} pushes of the open "
                                   f"round, the front {position}: the round must be replayed")
            current = self.model.current()
            if current is None or current.version != round_version:
                raise ShardRefused("version", f"shard {self.index} holds version {self.model.version}, the round "
                                   f"builds on {round_version}")
            if self.prepared is not None:
                raise ShardRefused("version", f"shard {self.index} has prepared version {self.prepared[0]}: "
                                   "commit or abort it first")
            staged = self._staged(push_id)
            if push_id in self.folded:
                raise ShardRefused("unknown_push", f"push {push_id!r} is already in the open round")
            if self.acc is None:
                self.acc = self.strategy.open_round(current)
            payload = FoldedPayload(client_id, norm, self.hi - self.lo, staged, self.lo, self.hi, self.total)
            weight = self.strategy.fold(self.acc, BoundedPayload(payload, scale), Admission(staleness, factor),
                                        num_tokens=num_tokens, local_steps=local_steps)
            self.folded.append(push_id)
            staged.release()  # folded: the sum holds it now; a replay decodes the file again
            return weight

    # ---- two-phase apply --------------------------------------------------------------------------

    def prepare(self, version: int, folded: int) -> tuple[bool, str, float]:
        """Close the round and write the slice of `version` durably; (ok, why not, squared norm of the slice)."""
        with self.lock:
            if self.prepared is not None and self.prepared[0] == version:
                return True, "", self.prepared[2]
            if folded != len(self.folded):
                raise ShardRefused("replay", f"shard {self.index} holds {len(self.folded)} pushes of the open "
                                   f"round, the front {folded}: the round must be replayed")
            current = self.model.current()
            if current is None or current.version + 1 != version:
                raise ShardRefused("version", f"shard {self.index} holds version {self.model.version}; it cannot "
                                   f"prepare version {version}")
            closed = (self.strategy.close(self.acc) if self.acc is not None
                      else empty_round(self.strategy.round_numel(current)))
            self.acc = None
            if not all_finite(closed.delta):
                self._reload_strategy()
                return False, f"shard {self.index}: the combined update is non-finite", 0.0
            flat = self.strategy.apply(current, closed)
            if not all_finite(flat):
                self._reload_strategy()
                return False, f"shard {self.index}: the next model is non-finite", 0.0
            self._checkpoint(version, flat, current.manifest, self.prepared_dir)
            self.prepared = (version, flat, sq_norm(flat))
            return True, "", self.prepared[2]

    def _reload_strategy(self) -> None:
        """The strategy state of the committed slice (an aborted apply may have moved the outer optimizer)."""
        ckpt = self.store.load_latest()
        if ckpt is not None and ckpt.aggregator.get("strategy"):
            self.strategy.load_state_dict(ckpt.aggregator["strategy"])

    def _prepared_file(self, version: int) -> Path:
        return self.prepared_dir / f"ps-v{version:012d}.safetensors"

    def commit(self, version: int) -> Snapshot:
        with self.lock:
            current = self.model.current()
            if current is not None and current.version == version:
                return current  # a retried commit
            if self.prepared is None or self.prepared[0] != version:
                raise ShardRefused("version", f"shard {self.index} has not prepared version {version} (holds "
                                   f"{self.model.version})")
            os.replace(self._prepared_file(version), self.dir / self._prepared_file(version).name)
            self.store._prune()
            flat = self.prepared[1]
            self.prepared = None
            self._close_round()
            return self.model.publish(version, flat, current.manifest)

    def _close_round(self) -> None:
        for push_id in self.folded:
            staged = self.staged.pop(push_id, None)
            if staged is not None:
                self._delete(staged)
        self.folded, self.acc = [], None

    def abort(self, version: int) -> None:
        """Drop the round (and a prepared slice of `version`): the committed slice stays."""
        with self.lock:
            if self.prepared is not None:
                self._prepared_file(self.prepared[0]).unlink(missing_ok=True)
                self.prepared = None
                self._reload_strategy()
            self._close_round()

    def sync(self, version: int, drop: list[str], keep: list[str] | None = None) -> None:
        """Come to the front's committed `version`: promote a prepared slice of it, drop any open round.

        Staged pushes in `drop` are deleted (those of the committed round: a shard restarted between prepare
        and commit no longer knows which they were); the others stay, the front folds them again. With
        `keep`, every staged push not in it is deleted too: the front names what it still folds or is
        receiving, so a round a restarted front forgot, or a push it refused while this shard was down,
        leaves no file behind.

        Refused (ShardRefused "version") when this shard holds neither: the shards disagree and no version
        is published until it is restored from the right checkpoint directory.
        """
        with self.lock:
            if self.model.version + 1 == version:
                path = self._prepared_file(version)
                if self.prepared is None and path.exists():
                    ckpt = CheckpointStore.load(path)
                    self.prepared = (version, ckpt.flat, sq_norm(ckpt.flat))
                    if ckpt.aggregator.get("strategy"):
                        self.strategy.load_state_dict(ckpt.aggregator["strategy"])
                if self.prepared is not None and self.prepared[0] == version:
                    self.commit(version)
                    log.info("event=shard_promoted index=%d version=%d", self.index, version)
            if self.model.version != version:
                raise ShardRefused("version", f"shard {self.index} holds version {self.model.version}, the "
                                   f"federation's committed version is {version}: restore this shard's checkpoint "
                                   "directory (its slice cannot be rebuilt from the other shards)")
            if self.prepared is not None:
                self.abort(self.prepared[0])
            self.folded, self.acc = [], None  # the front replays the open round's folds
            for p in self.prepared_dir.glob("*.safetensors"):
                p.unlink(missing_ok=True)
            gone = set(drop) | (set(self.staged) - set(keep) if keep is not None else set())
            for push_id in sorted(gone):
                staged = self.staged.pop(push_id, None)
                if staged is not None:
                    self._delete(staged)
            if keep is not None and gone:
                log.info("event=shard_staged_dropped index=%d pushes=%d", self.index, len(gone))

    def read(self, version: int) -> Snapshot:
        snap = self.model.current()
        if snap is None or snap.version != version:
            raise ShardRefused("version", f"shard {self.index} holds version {self.model.version}, not {version}")
        return snap

    def state(self) -> dict:
        snap = self.model.current()
        return {"index": self.index, "version": self.model.version,
                "prepared": self.prepared[0] if self.prepared else 0, "lo": self.lo, "hi": self.hi,
                "instance": self.instance, "folded": len(self.folded), "sha256": snap.sha256 if snap else b""}
