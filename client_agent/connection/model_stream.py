"""The client's receiver of global models: one long-lived StreamModel call on its own thread.

A broken download resumes at the byte it reached; a damaged chunk is refetched from its offset. Every
completed transfer is checksum-verified before it is published to the waiters (`wait_for_version`,
`wait_for_fresh`). On demand (federation.downlink.prefetch off) the stream is open only while someone waits
for a newer model, so a client receives one difference per sync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Protocol

import grpc

from geofed.manifest import Manifest
from geofed.protocol import geofed_pb2 as pb

from ..errors import JoinError
from .backoff import Backoff
from .link_tuner import LinkMeter
from .model_transfer import ChunkDamaged, ModelAssembler, TransferRestart
from .rejoin_hold import GlobalVersion, RejoinHold

log = logging.getLogger("geofed.client")


class Connection(Protocol):
    """What the stream needs of its PS connection (`PSClient`): the session, what the last Join said, where
    to count the link, and the settling of a delta the PS had accepted."""

    stub: object
    link: LinkMeter
    manifest: Manifest
    server_instance: str
    join_version: int

    def metadata(self) -> tuple: ...

    def rejoin_after(self, exc: grpc.RpcError) -> None: ...

    def learn_shard_map(self, msg: pb.ModelChunk) -> None: ...

    def settle_pending(self, version: int) -> None: ...


class ModelStream:
    """The model-stream thread of one `PSClient` and the newest model it received."""

    def __init__(self, ps: Connection, stop: threading.Event) -> None:
        self.ps, self.stop = ps, stop
        self.decoders: Mapping = {}  # the paradigm's own downlink encodings, by name
        self.hold = RejoinHold()
        self.cond = threading.Condition()
        self.latest: GlobalVersion | None = None
        self.on_demand = False
        # On demand: the version a waiter needs a newer model than (-1: any other model); None: nobody waits.
        self.demand: int | None = 0  # the first model is fetched at start, while the model is being built
        self.call = None
        self.thread: threading.Thread | None = None
        self.bytes_received = 0
        self.resumes = 0
        self.version_seen = 0  # the newest version a Join or push response named (a newer model waits there)

    def start(self, decoders: Mapping) -> None:
        self.decoders = decoders
        self.thread = threading.Thread(target=self.run, name="geofed-model-stream", daemon=True)
        self.thread.start()

    def offer(self, kept: GlobalVersion) -> str:
        """Before `start`: a model kept from before a relaunch (see `RejoinHold.offer`)."""
        use = self.hold.offer(kept, self.ps.join_version, self.ps.server_instance)
        if use == "adopted":
            with self.cond:
                self.latest, self.demand = kept, None
        return use

    def forget(self) -> None:
        """The PS restarted: take whatever it streams next (our model may be newer than its version)."""
        with self.cond:
            self.latest = None

    def wait_for_fresh(self, than: GlobalVersion | None, timeout: float | None = None) -> GlobalVersion | None:
        """Block until a model other than `than` has been received (any version: used after a resync)."""
        with self.cond:
            if self.latest is than or self.latest is None:  # None: a PS restart dropped what we held
                self.demand = -1
                self.cond.notify_all()
            self.cond.wait_for(
                lambda: self.stop.is_set() or (self.latest is not None and self.latest is not than), timeout
            )
            latest = self.latest
        return latest if latest is not None and latest is not than else None

    def wait_for_version(self, newer_than: int, timeout: float | None = None) -> GlobalVersion | None:
        """Block until a global version > `newer_than` has been fully received."""
        with self.cond:
            if self.demand != -1 and (self.latest is None or self.latest.version <= newer_than):
                self.demand = max(self.demand or 0, newer_than)
                self.cond.notify_all()
            self.cond.wait_for(
                lambda: self.stop.is_set() or (self.latest is not None and self.latest.version > newer_than),
                timeout,
            )
            latest = self.latest
        return latest if latest is not None and latest.version > newer_than else None

    def run(self) -> None:
        """The stream loop: (re)open StreamModel and take its chunks until `stop` is set."""
        backoff = Backoff()
        assembler = ModelAssembler(self.decoders)
        while not self.stop.is_set():
            if self.on_demand:
                with self.cond:  # nothing to fetch until someone waits for a model
                    self.cond.wait_for(lambda: self.stop.is_set() or self.demand is not None, 1.0)
                    if self.demand is None:
                        continue
            base = self.latest or self.hold.kept
            have = base.version if base else 0
            req = pb.StreamModelRequest(have_version=have, one_transfer=self.on_demand)
            resume = assembler.resume_point()
            if resume is not None:
                req.resume_version, req.resume_offset = resume
                self.resumes += 1
            call = None
            try:
                self.ps.link.stream_opened(time.monotonic(), self.version_seen > have)
                call = self.ps.stub.StreamModel(req, metadata=self.ps.metadata())
                self.call = call
                for chunk in call:
                    if self.stop.is_set():
                        break
                    got = self.take_chunk(assembler, chunk)
                    backoff.reset()
                    if got and self.on_demand and self.demand is None:
                        call.cancel()  # the waiter has its model; reopen at the next demand
                        break
            except (ChunkDamaged, TransferRestart) as exc:
                # Reopen the stream: at the offset reached (a damaged chunk), or from the start.
                if isinstance(exc, TransferRestart):
                    assembler.reset()
                    if self.latest is None:
                        self.hold.refused()
                log.warning("event=model_chunk_refetch reason=%r", str(exc))
                if call is not None:
                    call.cancel()
                time.sleep(backoff.next_delay())
            except grpc.RpcError as exc:
                if self.stop.is_set():
                    return
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    try:
                        self.ps.rejoin_after(exc)
                    except JoinError as err:
                        log.error("event=rejoin_failed error=%r", str(err))
                        time.sleep(backoff.next_delay())
                    continue
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    assembler.reset()  # our resume point is unusable: start the transfer over
                resume = assembler.resume_point()
                log.warning("event=stream_broken code=%s resume_bytes=%d", exc.code().name, resume[1] if resume else 0)
                time.sleep(backoff.next_delay())
            except JoinError:
                time.sleep(backoff.next_delay())
            except Exception as exc:  # noqa: BLE001 - a dead stream thread would leave the agent waiting forever
                if self.stop.is_set():
                    return
                log.error("event=model_stream_error error=%r", f"{type(exc).__name__}: {exc}")
                assembler.reset()  # start the transfer over: the failure may lie in what was assembled
                if call is not None:
                    call.cancel()
                time.sleep(backoff.next_delay())

    def take_chunk(self, assembler: ModelAssembler, chunk: pb.ModelChunk) -> bool:
        """Feed one chunk to the assembler; publish the vector when a transfer completes and verifies (True)."""
        self.ps.learn_shard_map(chunk)
        self.bytes_received += len(chunk.data)
        if chunk.offset == 0:
            self.ps.link.first_chunk(chunk.version, time.monotonic(), len(chunk.data))
        held = self.latest or self.hold.kept
        got = assembler.take(chunk, (held.version, held.flat) if held is not None else None)
        if got is None:
            return False
        self.hold.settled()
        self.ps.link.downloaded(got.version, got.nbytes, time.monotonic())
        gv = GlobalVersion(
            got.version,
            got.flat,
            got.manifest or self.ps.manifest,
            seconds=got.seconds,
            instance=self.ps.server_instance,
        )
        if got.manifest:
            self.ps.manifest = got.manifest
        with self.cond:
            self.latest = gv
            if self.demand is not None and (self.demand == -1 or gv.version > self.demand):
                self.demand = None
            self.cond.notify_all()
        self.ps.settle_pending(got.version)
        log.info(
            "event=model_received version=%d encoding=%s bytes=%d seconds=%.2f",
            got.version,
            got.encoding,
            got.nbytes,
            got.seconds,
        )
        return True

    def close(self) -> None:
        if self.call is not None:
            self.call.cancel()
        with self.cond:
            self.cond.notify_all()
