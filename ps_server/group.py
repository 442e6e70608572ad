"""This PS's place in a multi-PS federation (paper §III-B1c): its ring reducer and the loop keeping it in step.

A federation that declares groups runs one PS per group. The PS core builds a `GroupMember` (or the null
`NoGroup` for a single PS), hands its reducer to the aggregator, and starts its sync loop, which keeps
the PS in step with the others: at start, after being excluded from a ring, or when it finds the others
ahead, it fetches the most advanced reachable peer's model and outer-optimizer state, adopts them, and
asks to be in the next ring. No gRPC here: the wire is the injected `GroupTransport`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geofed.config import FederationConfig, ServerConfig
from geofed.ps_groups import check_group

from .aggregation.aggregator import Aggregator
from .aggregation.reducer import LocalReducer, Reducer
from .aggregation.ring import PeerError, RingReducer, RingTransport
from .errors import ParadigmMismatch
from .global_model import GlobalModel, Manifest

log = logging.getLogger("geofed.ps")


@dataclass(frozen=True)
class PeerHead:
    """What a peer PS holds: version, model digest and the ring it runs next."""

    version: int
    sha256: bytes
    members: tuple[str, ...]


@dataclass(frozen=True)
class PeerModel:
    """A peer's whole model and strategy state, fetched to rejoin from it."""

    head: PeerHead
    flat: np.ndarray
    manifest: Manifest
    strategy_state: dict


class GroupTransport(RingTransport, Protocol):
    """The ring's wire plus what a rejoining PS needs; every method raises PeerError."""

    def head(self, peer: str, timeout: float) -> PeerHead: ...

    def fetch(self, peer: str, timeout: float) -> PeerModel: ...

    def join(self, peer: str, timeout: float) -> None: ...


class NoGroup:
    """A single-PS federation: the identity reducer, nothing to keep in step."""

    enabled = False
    reducer: Reducer = LocalReducer()

    def check_client_group(self, group: str) -> None:
        """Any client may join the only PS."""

    def start(self, aggregator: Aggregator, stop: threading.Event) -> None:
        """Nothing to run."""

    def status(self) -> dict:
        return {}


class GroupMember:
    """One PS of a multi-PS federation."""

    enabled = True

    def __init__(self, fed: FederationConfig, server: ServerConfig, transport: GroupTransport, model: GlobalModel,
                 *, period_s: float = 0.5) -> None:
        why = check_group(fed.groups, server.group) if server.group else "a federation with PS groups needs --group"
        if why:
            raise ValueError(why)
        self.fed, self.name, self.transport, self.model, self.period_s = fed, server.group, transport, model, period_s
        self.reducer = RingReducer(
            server.group, [g.name for g in fed.groups], transport, timeout_s=fed.ring.timeout_s,
            retries=fed.ring.retries, codec=fed.ring.codec, min_interval_s=fed.ring.min_interval_s,
            version=lambda: model.version,
        )
        self.reducer.needs_sync = True  # the group may have moved on while this PS was away
        self.check_every_s, self._last_check = 2.0, 0.0
        self.aggregator: Aggregator | None = None

    @property
    def peers(self) -> list[str]:
        return [g for g in self.reducer.groups if g != self.name]

    def check_client_group(self, group: str) -> None:
        """Refuse (ParadigmMismatch) a client that names an unknown group or another group's PS."""
        if not group:
            return  # a client that names no group belongs to the PS it dialled
        why = check_group(self.fed.groups, group)
        if why:
            raise ParadigmMismatch(why)
        if group != self.name:
            raise ParadigmMismatch(f"this PS serves group {self.name!r}, not {group!r}: dial group {group!r}'s PS")

    def start(self, aggregator: Aggregator, stop: threading.Event) -> None:
        self.aggregator = aggregator

        def run() -> None:
            while not stop.wait(self.period_s):
                try:
                    self.sync_once()
                except Exception:  # keep the loop alive; the error is logged with its traceback
                    log.exception("event=group_sync_failed")

        threading.Thread(target=run, name="geofed-group-sync", daemon=True).start()

    def sync_once(self) -> None:
        """Catch up with the most advanced reachable peer when this PS needs to (see the module docstring)."""
        r = self.reducer
        if self.model.current() is None:
            r.needs_sync = True  # a PS without a model takes Θ0 from whichever PS its master client seeded
        if not (r.needs_sync or r.joining):
            self._check_still_member()
            return
        heads: dict[str, PeerHead] = {}
        for peer in self.peers:
            try:
                heads[peer] = self.transport.head(peer, 5.0)
            except PeerError as exc:
                log.debug("event=peer_unreachable peer=%s error=%r", peer, str(exc))
        snap = self.model.current()
        mine = snap.version if snap else 0
        best = max(heads, key=lambda p: heads[p].version, default=None)
        if best is None or heads[best].version < mine or (heads[best].version == 0 and mine == 0):
            if r.needs_sync and mine > 0:  # nobody is ahead of this PS: it goes on with its own model
                log.info("event=group_sync version=%d source=self reachable=%s", mine, ",".join(heads) or "-")
                r.rejoined(r.members if self.name in r.members else (*r.members, self.name))
            return
        head = heads[best]
        if head.version == mine and snap is not None and head.sha256 == snap.sha256:
            r.rejoined(head.members)
        elif r.needs_sync or head.version > mine:
            model = self.transport.fetch(best, 60.0)
            assert self.aggregator is not None
            with self.aggregator.lock:  # not backwards: a ring may have committed while the model travelled
                if self.model.version > model.head.version:
                    return
                self.aggregator.adopt(model.head.version, model.flat, model.manifest, model.strategy_state)
                r.rejoined(model.head.members)
            log.info("event=group_sync version=%d source=%s members=%s", model.head.version, best,
                     ",".join(model.head.members))
        if r.joining:
            for peer in head.members:
                try:
                    self.transport.join(peer, 5.0)
                except PeerError as exc:
                    log.warning("event=ring_join_failed peer=%s error=%r", peer, str(exc))

    def _check_still_member(self) -> None:
        """Every few seconds: did the others go on without this PS (it stalled and was excluded)? Then its
        model may differ from theirs: resync before its clients train further on it."""
        now = time.monotonic()
        if now - self._last_check < self.check_every_s:
            return
        self._last_check = now
        mine = self.model.version
        for peer in self.peers:
            try:
                head = self.transport.head(peer, 2.0)
            except PeerError:
                continue
            if head.version >= mine and self.name not in head.members and self.name in self.reducer.members:
                log.warning("event=ring_excluded_here peer=%s version=%d their_members=%s", peer, head.version,
                            ",".join(head.members))
                self.reducer.needs_sync = True
                return

    def status(self) -> dict:
        return {"group": self.name, "ring_allreduces": self.reducer.completed,
                "ring_members": list(self.reducer.members)}


def build_group(fed: FederationConfig, server: ServerConfig, transport: GroupTransport | None,
                model: GlobalModel) -> GroupMember | NoGroup:
    """The group member of a federation with PS groups, else the null object."""
    if not fed.groups:
        return NoGroup()
    if transport is None:
        raise ValueError("a federation with PS groups needs a transport to its peers")
    return GroupMember(fed, server, transport, model)
