"""The round engine of a sharded PS: the front's `Aggregator` admits, the shards hold the model.

The front is the PS clients see: Join, sessions, rate limits, and the one `Aggregator` every PS runs
(admission, staleness, idempotent upload ids, the site defences of `DeltaGuard`, when a round closes).
`ShardedEngine` is the engine its rounds run on. It holds no model: `ShardedReceiver` routes a push's
frames to the shards (each decodes, checks and durably stages its slice and reports its squared norm and
its slice's count sketch); the front sums them, so the guard bounds the whole delta exactly as on one PS,
and every shard folds it with the same factors. A round closes in two phases (paper §III-B1's "publish a
new version", made atomic across processes):

1. `prepare(v)` on every shard: each closes its round, applies the outer step to its slice and writes the
   slice of v next to its committed one. Any refusal: `abort(v)` everywhere, the round is dropped.
2. The front records v as committed (durably), then `commit(v)` on every shard, then publishes v to
   clients, once every shard holds it. A shard that is down meanwhile is committed by `sync(v)` when it
   is back (it promotes its prepared slice); until then v is not published, so no client ever sees a mix.

A shard restarted mid-round has lost its open round's sum but not the staged pushes on its disk: the
front notices (a different instance, or the shard's own count of folded pushes differs) and replays the
round's folds. Memory: the front holds no model-sized buffer; each shard holds O(model / N).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import secrets
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geofed.config import FederationConfig
from geofed.manifest import Manifest, TensorEntry, validate_manifest
from geofed.shard_map import ShardMap, ShardMapError, split_manifest

from ..aggregation.engine import Resumed, RoundClosed, RoundEngine
from ..checkpoint import CheckpointStore
from ..errors import CorruptPayload, InvalidPush, NotReady, StaleDelta
from ..global_model import GlobalModel, Snapshot
from ..ingest import PushHeader, check_envelope
from .errors import ShardRefused, ShardUnavailable
from .link import ShardLink, StageCall, StagedSlice
from .router import FrameRouter

log = logging.getLogger("geofed.ps.front")

_EMPTY = np.empty(0, dtype=np.float32)
_STATE_FILE = "front-state.json"


class FrontModel(GlobalModel):
    """The front's view of the global model: version, digest and manifest; the values live in the shards."""

    def publish_remote(self, version: int, sha256: bytes, manifest: Manifest, numel: int) -> Snapshot:
        snap = Snapshot(version, _EMPTY, sha256, manifest)
        self.numel = numel
        with self._cond:
            self._snapshot = snap
            self._cond.notify_all()
        return snap


@dataclass
class StagedFrontPush:
    """A push every shard has staged; what `ParameterServerCore.complete_push` and the aggregator see."""

    client_id: str
    header: PushHeader
    codec_name: str
    numel: int
    norm: float
    push_id: str
    shard_map: ShardMap
    sketch: np.ndarray | None = None  # the whole delta's count sketch: the sum of its slices' (the guard's budget)

    def close(self) -> None:
        """The staged files belong to the shards until the round is committed or the push dropped."""


@dataclass
class Fold:
    """One push folded into the open round, as every shard must replay it after a restart."""

    push_id: str
    client_id: str
    scale: float
    norm: float
    staleness: int
    factor: float
    num_tokens: int
    local_steps: int

    def factors(self, position: int) -> dict:
        """The keyword arguments of a shard's fold of this push, `position` pushes into the round."""
        return dict(scale=self.scale, norm=self.norm, staleness=self.staleness, factor=self.factor,
                    num_tokens=self.num_tokens, local_steps=self.local_steps, position=position)


@dataclass
class ShardView:
    """What the front last saw of one shard (for status and for noticing restarts)."""

    index: int
    address: str
    up: bool = False
    version: int = 0
    numel: int = 0
    instance: str = ""
    last_error: str = ""
    synced: bool = False  # its instance has been brought to the committed version and the open round


class ShardedReceiver:
    """One push through the front: header checks, frame routing to the shards, trailer checks.

    Same interface as `ps_server.ingest.PushReceiver` (on_header, on_payload, on_trailer, abort)."""

    def __init__(self, front: ShardedEngine, *, client_id: str, max_upload_bytes: int,
                 max_init_numel: int) -> None:
        self.front, self.client_id = front, client_id
        self.max_upload_bytes, self.max_init_numel = max_upload_bytes, max_init_numel
        self.header: PushHeader | None = None
        self.received = 0
        self.push_id = secrets.token_hex(12)
        self._sha = hashlib.sha256()
        self._router: FrameRouter | None = None
        self._map: ShardMap | None = None
        self._call: StageCall | None = None
        self._shard = -1
        self._slices: dict[int, StagedSlice] = {}
        self._touched: set[int] = set()
        with front.receivers_lock:
            front.receivers.add(self)

    def on_header(self, header: PushHeader) -> None:
        check_envelope(header, self.header is not None, self.max_upload_bytes)
        if header.init:
            try:
                validate_manifest(header.manifest, max_numel=self.max_init_numel)
                self._map = split_manifest(header.manifest, self.front.link.shards)
            except ValueError as exc:  # ShardMapError too
                raise InvalidPush("manifest", f"init manifest: {exc}") from exc
        else:
            self._map = self.front.shard_map
            if self._map is None:
                raise NotReady("no_model", "the PS has no model yet: the master must init")
            self.front.check_header(header)
        self._router = FrameRouter(self._map, header.codec_header, init=header.init)
        self.header = header

    def on_payload(self, offset: int, data: bytes) -> None:
        if self.header is None or self._router is None:
            raise InvalidPush("protocol", "payload before header")
        if offset != self.received:
            raise InvalidPush("order", f"chunk at offset {offset}, expected offset {self.received}")
        if self.received + len(data) > self.header.payload_bytes:
            raise InvalidPush("size", f"payload exceeds the declared {self.header.payload_bytes} bytes")
        self.received += len(data)
        self._sha.update(data)
        for shard, frame in self._router.feed(data):
            if shard != self._shard:
                self._next_shard(shard)
            self._call.send(frame)

    def _next_shard(self, shard: int) -> None:
        """Frames come in offset order, so a push visits the shards in index order: one stream at a time."""
        self._finish_call()
        lo, hi = self._map.slice_of(shard)
        self._shard = shard
        self._touched.add(shard)
        self._call = self.front.call(self.front.link.stage, shard, self.push_id, self.header.codec_header,
                                     init=self.header.init, lo=lo, hi=hi)

    def _finish_call(self) -> None:
        if self._call is not None:
            call, self._call = self._call, None
            self._slices[self._shard] = self.front.tracked(self._shard, call.finish)

    def on_trailer(self, sha256: bytes) -> StagedFrontPush:
        if self.header is None or self._router is None:
            raise InvalidPush("protocol", "trailer before header")
        if self.received != self.header.payload_bytes:
            raise InvalidPush("truncated", f"payload truncated: received {self.received} of "
                              f"{self.header.payload_bytes} bytes")
        if sha256 != self._sha.digest():
            raise CorruptPayload("checksum", "payload checksum mismatch")
        self._router.finish()
        self._finish_call()
        missing = [i for i in range(self._map.shards) if i not in self._slices]
        if missing:
            raise InvalidPush("truncated", f"no frames reached PS shards {missing}")
        norm = math.sqrt(sum(s.sq_norm for s in self._slices.values()))
        if not math.isfinite(norm):
            raise InvalidPush("nonfinite", "delta norm overflows float")
        sketches = [s.sketch for s in self._slices.values() if s.sketch is not None]
        sketch = np.sum(sketches, axis=0) if sketches and not self.header.init else None
        return StagedFrontPush(self.client_id, self.header, self._router.codec_name, self._map.numel, norm,
                               self.push_id, self._map, sketch)

    def abort(self) -> None:
        """Drop what the shards staged of this push (best effort: a shard that is down drops it on sync)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self.front.drop_staged(self.push_id, self._touched)


class ShardedEngine(RoundEngine):
    """The rounds of a sharded PS's front: fold, close and apply go through `link` to the shards."""

    def __init__(self, fed: FederationConfig, link: ShardLink, state_dir: str | os.PathLike) -> None:
        self.fed = fed
        self.model = FrontModel()
        self.link = link
        self.shard_map: ShardMap | None = None
        self.model_norm = 0.0  # ‖θ‖ of the committed version, as the shards report it
        self.folds: list[Fold] = []
        self.views = [ShardView(i, link.address(i)) for i in range(link.shards)]
        self.state_path = Path(state_dir) / _STATE_FILE
        self.unpublished: int = 0  # a version committed (recorded) but not yet held by every shard
        self.committed_round: list[str] = []  # push ids of the last committed round (a restarted shard drops them)
        # Pushes being received (alive while their RPC runs): a shard synced meanwhile keeps their staged files.
        self.receivers: weakref.WeakSet[ShardedReceiver] = weakref.WeakSet()
        self.receivers_lock = threading.Lock()

    # ---- shards -----------------------------------------------------------------------------------

    def call(self, fn, i: int, *args, **kw):
        """`fn(i, *args, **kw)`: one call to shard i (see `tracked`)."""
        return self.tracked(i, lambda: fn(i, *args, **kw))

    def tracked(self, i: int, thunk):
        """Run a call to shard i, keeping its view; a shard that could not be reached must be resynced."""
        view = self.views[i]
        try:
            out = thunk()
        except ShardUnavailable as exc:
            view.up, view.synced, view.last_error = False, False, exc.message
            raise
        view.up = True
        return out

    def drop_staged(self, push_id: str, shards) -> None:
        for i in shards:
            try:
                self.call(self.link.drop, i, [push_id])
            except (ShardUnavailable, ShardRefused) as exc:
                log.info("event=shard_drop_later shard=%d push=%s error=%r", i, push_id, exc.message)

    def ensure(self, i: int) -> None:
        """Bring shard i to the committed version and the open round (after a restart: replay its folds)."""
        view = self.views[i]
        state = self.call(self.link.describe, i)
        if view.synced and state["instance"] == view.instance:
            return
        version = self.unpublished or self.model.version
        # What the shard must keep: the open round's pushes (replayed below) and those being received now.
        with self.receivers_lock:
            keep = [f.push_id for f in self.folds] + [r.push_id for r in self.receivers]
        try:
            state = self.call(self.link.sync, i, version, list(self.committed_round), keep)
        except ShardRefused as exc:
            view.last_error = exc.message
            raise ShardUnavailable("shard_version", exc.message) from None
        base = self.model.version
        for k, fold in enumerate(self.folds):
            self.call(self.link.fold, i, fold.push_id, fold.client_id, base, **fold.factors(k))
        view.instance, view.version, view.synced, view.last_error = state["instance"], state["version"], True, ""
        view.numel = state["hi"] - state["lo"]
        if self.folds:
            log.info("event=shard_replayed shard=%d version=%d folds=%d", i, version, len(self.folds))

    def ensure_all(self) -> None:
        for i in range(self.link.shards):
            if not self.views[i].synced:
                self.ensure(i)

    def check_header(self, header: PushHeader) -> None:
        """A push cut for another shard map is refused before its payload crosses the WAN (the client
        resyncs, learning the current map from the model stream, and re-encodes)."""
        if self.shard_map is not None and header.shard_map != self.shard_map.digest:
            raise StaleDelta("shard_map", "this push was cut for another PS shard map (the federation's PS "
                             f"shards are {list(self.shard_map.bounds)}): resync and re-encode for the current map")

    def payload_numel(self) -> int | None:
        return self.shard_map.numel if self.shard_map else None

    def receiver(self, client_id: str, *, max_upload_bytes: int, max_init_numel: int) -> ShardedReceiver:
        return ShardedReceiver(self, client_id=client_id, max_upload_bytes=max_upload_bytes,
                               max_init_numel=max_init_numel)

    def discard(self, push: StagedFrontPush) -> None:
        self.drop_staged(push.push_id, range(self.link.shards))

    def theta_norm(self, snapshot: Snapshot) -> float:
        return self.model_norm

    # ---- Θ0 ---------------------------------------------------------------------------------------

    def install(self, push: StagedFrontPush, version: int) -> Snapshot:
        for i in range(self.link.shards):
            self.call(self.link.install, i, push.push_id, version, push.header.manifest)
        self.shard_map = push.shard_map
        snap = self._publish(version, push.header.manifest)
        for view in self.views:
            view.synced = False  # learn their instances on the next push
        log.info("event=shards_installed version=%d shards=%s", version, list(push.shard_map.bounds))
        return snap

    def durable(self) -> None:
        self.save_state()

    # ---- rounds -----------------------------------------------------------------------------------

    def open_round(self, snapshot: Snapshot) -> _RoundCount:
        return _RoundCount()

    def fold(self, acc: _RoundCount, bounded, admission, *, num_tokens: int, local_steps: int) -> float:
        """Fold on every shard (each at the committed version first) with the front's factors."""
        for i in range(self.link.shards):  # a shard restarted since the last call is noticed here, not mid-fold
            self.ensure(i)
        push = bounded.received
        fold = Fold(push.push_id, push.client_id, bounded.scale, push.norm, admission.staleness, admission.factor,
                    num_tokens, local_steps)
        weight = self._fold_everywhere(fold)
        self.folds.append(fold)
        acc.count += 1
        acc.clients.add(push.client_id)
        acc.weight += weight
        return weight

    def _fold_everywhere(self, fold: Fold) -> float:
        """Fold on every shard; the weight (the same on each: same inputs, same strategy).

        A shard that cannot be reached keeps the push staged on its disk: it folds it when replayed."""
        weight = None
        for i in range(self.link.shards):
            try:
                w = self._fold_one(i, fold, len(self.folds))
            except (ShardUnavailable, ShardRefused) as exc:
                # It went away (or came back wrong) since `ensure`: the round cannot close until it is
                # back and replayed, so nothing is published half-folded.
                self.views[i].synced = False
                log.warning("event=shard_fold_deferred shard=%d push=%s reason=%r", i, fold.push_id, exc.message)
                continue
            weight = w if weight is None else weight
        if weight is None:
            raise ShardUnavailable("shard_down", "no PS shard could be reached")
        return weight

    def _fold_one(self, i: int, fold: Fold, position: int) -> float:
        try:
            return self.call(self.link.fold, i, fold.push_id, fold.client_id, self.model.version,
                             **fold.factors(position))
        except ShardRefused as exc:
            if exc.reason != "replay":
                raise
            self.views[i].synced = False  # it restarted since the last call: replay, then fold
            self.ensure(i)
            return self.call(self.link.fold, i, fold.push_id, fold.client_id, self.model.version,
                             **fold.factors(position))

    def settle(self) -> Snapshot | None:
        return self.finish_unpublished() if self.unpublished else None

    def close(self, acc: _RoundCount | None, current: Snapshot) -> RoundClosed:
        """Phase 1 on every shard (module docstring); the version is recorded as committed when all prepared."""
        version = current.version + 1
        acc = acc or _RoundCount()
        self.ensure_all()
        results, norms = [], []
        for i in range(self.link.shards):
            try:
                ok, why, sq = self.call(self.link.prepare, i, version, len(self.folds))
            except ShardRefused as exc:
                if exc.reason != "replay":
                    raise
                self.views[i].synced = False
                self.ensure(i)
                ok, why, sq = self.call(self.link.prepare, i, version, len(self.folds))
            results.append((ok, why))
            norms.append(sq)
        if not all(ok for ok, _ in results):
            why = "; ".join(w for ok, w in results if not ok)
            for i in range(self.link.shards):
                try:
                    self.call(self.link.abort, i, version)
                except ShardUnavailable:
                    pass  # it drops the round when it syncs back
            return RoundClosed(version, acc.count, len(acc.clients), acc.weight, dropped=("nonfinite_round", why))
        self.model_norm = math.sqrt(sum(norms))  # the bounds of the new model's norm
        self.unpublished = version
        self.committed_round = [f.push_id for f in self.folds]
        self.folds = []
        return RoundClosed(version, acc.count, len(acc.clients), acc.weight)

    def publish(self, closed: RoundClosed, manifest: Manifest) -> Snapshot | None:
        """Phase 2: the decision is durable before any shard publishes; None while a shard lacks it."""
        self.save_state()
        return self.finish_unpublished(raise_unavailable=False)

    def reset_round(self) -> None:
        self.folds = []

    def finish_unpublished(self, raise_unavailable: bool = True) -> Snapshot | None:
        """Commit the recorded version on every shard, then publish it (idempotent; retried by the timer)."""
        version = self.unpublished
        if not version:
            return None
        try:
            for i in range(self.link.shards):
                view = self.views[i]
                try:
                    state = self.call(self.link.commit, i, version)
                except ShardRefused:  # restarted since it prepared: sync promotes its prepared slice
                    view.synced = False
                    state = self.call(self.link.sync, i, version, list(self.committed_round))
                    view.instance, view.synced = state["instance"], True
                view.version = state["version"]
        except ShardUnavailable:
            if raise_unavailable:
                raise
            log.warning("event=publish_deferred version=%d", version)
            return None
        snap = self._publish(version, self.model.current().manifest)
        self.unpublished = 0
        self.save_state()
        return snap

    def _publish(self, version: int, manifest: Manifest) -> Snapshot:
        """Publish `version` once every shard holds it; its digest is over the whole vector, as clients check."""
        h = hashlib.sha256()
        for i in range(self.link.shards):
            for data in self.call(self.link.read, i, version, 0):
                h.update(data)
            self.views[i].version = version
        return self.model.publish_remote(version, h.digest(), manifest, self.shard_map.numel)

    # ---- durability -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        snap = self.model.current()
        return {
            "format": "geofed-front/1",
            "version": snap.version if snap else 0,
            "sha256": snap.sha256.hex() if snap else "",
            "manifest": [[t.name, list(t.shape), t.dtype] for t in snap.manifest] if snap else [],
            "bounds": list(self.shard_map.bounds) if self.shard_map else [],
            "unpublished": self.unpublished,
            "committed_round": self.committed_round,
            "theta_norm": self.model_norm,
        }

    def save_state(self) -> None:
        """Atomically (write, fsync, rename): the record of which version the federation committed."""
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.agg.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    def save(self, store: CheckpointStore, registry: dict) -> str:
        """The front's own record (committed version, upload ids, ledger); the shards hold the model and the
        registry is the store's own file."""
        self.save_state()
        return str(self.state_path)

    def resume(self, store: CheckpointStore) -> Resumed | None:
        return Resumed(self.model.version) if self.load_state() else None

    def load_state(self) -> bool:
        """Resume: the committed version (published once every shard is synced to it)."""
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return False
        if not state.get("version"):
            return False
        manifest = tuple(TensorEntry(n, tuple(s), d) for n, s, d in state["manifest"])
        try:
            self.shard_map = ShardMap(tuple(state["bounds"]))
        except ShardMapError as exc:
            raise ValueError(f"{self.state_path}: {exc}") from exc
        if self.shard_map.shards != self.link.shards:
            raise ValueError(f"the federation's model is split into {self.shard_map.shards} PS shards "
                             f"({self.state_path}), but this front dials {self.link.shards}")
        self.agg.load_bookkeeping(state)
        self.model_norm = float(state.get("theta_norm", 0.0))
        version = int(state["version"])
        self.unpublished = int(state.get("unpublished", 0))
        self.committed_round = [str(p) for p in state.get("committed_round", [])]
        self.model.publish_remote(version, bytes.fromhex(state["sha256"]), manifest, self.shard_map.numel)
        log.info("event=front_resume version=%d shards=%d", version, self.link.shards)
        return True

    def status(self) -> dict:
        return {"num_parameters": self.shard_map.numel if self.shard_map else 0, "shards": self.shard_status()}

    def shard_status(self) -> list[dict]:
        return [{"index": v.index, "address": v.address, "up": v.up, "version": v.version, "numel": v.numel,
                 "instance": v.instance, "last_error": v.last_error} for v in self.views]


@dataclass
class _RoundCount:
    """The front's account of the open round (the sums live in the shards)."""

    count: int = 0
    clients: set[str] = field(default_factory=set)
    weight: float = 0.0

    def close(self) -> None:
        """Nothing to release."""
