"""Ring all-reduce of round sums between the PSs of a multi-PS federation (paper §III-B1c), as a Reducer.

Each PS closes rounds for its own clients; between close and apply its `RingReducer` combines the round
sum with every other PS's in a ring: N-1 reduce-scatter steps (each PS adds the chunk its predecessor
sends into its own buffer, weighted by round weight) and N-1 all-gather steps (the owner of each fully
reduced chunk divides it by the total weight, encodes it once, and those exact bytes travel round the
ring). Every PS therefore ends with the same bits whatever the chunk codec. Chunks are compressed with
the delta codec (min-max quantisation + Huffman).

Version agreement and "never half-applied" (a two-phase end):

* a ring is keyed by (version, members); a PS refuses a chunk for a version it has passed, so a PS that
  fell behind learns it must resync instead of combining rounds of different models;
* after the all-gather each PS tells every other member "done" (it holds the whole result) and commits
  only when it has every member's "done". Commit is the point of no return;
* a PS whose ring times out (a dead or stalled partner) aborts the key locally and asks every member to
  abort it too; a member answers "committed" if it already had, and otherwise marks the key aborted, so it
  never commits later. Whoever committed had every "done", so every member holds the result: one
  "committed" answer makes the asker commit too. Otherwise the survivors that answered retry at the same
  version without the others. Either the ring completes for everyone or nobody applies it;
* an excluded PS (dead, stalled, restarted) rejoins from the others' model: it fetches a peer's snapshot
  (and outer-optimizer state), asks to join, and the next committed ring adds it to the members.

Pure: numpy and threads; the wire is a `RingTransport` (`ps_server/peers.py` over gRPC, a fake in tests).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from geofed.codec import CodecError
from geofed.codec.framed import pack, unpack

from .reducer import ReduceFailed
from .strategy import RoundSum

log = logging.getLogger("geofed.ps")

SCATTER, GATHER, DONE = "scatter", "gather", "done"
COMMITTED, ABORTED, RUNNING = "committed", "aborted", "running"


@dataclass(frozen=True)
class RingKey:
    """One ring attempt: the version every member combines on top of, and who takes part (sorted)."""

    version: int
    members: tuple[str, ...]
    attempt: int = 0


@dataclass
class RingMessage:
    """One step of one ring attempt from `sender` to its successor (or, for DONE, to every member)."""

    key: RingKey
    sender: str
    phase: str
    step: int = 0
    payload: bytes = b""
    # Round weight and delta count of every member heard of so far (travels round the ring with the chunks).
    meta: dict[str, tuple[float, int]] = field(default_factory=dict)
    candidates: tuple[str, ...] = ()  # DONE only: PSs that asked the sender to (re)join


class PeerError(Exception):
    """A call to another PS failed; `kind` is unreachable | refused | ahead | excluded."""

    def __init__(self, peer: str, kind: str, message: str, version: int = 0) -> None:
        super().__init__(f"PS group {peer!r}: {message}")
        self.peer, self.kind, self.version = peer, kind, version


class RingRefused(Exception):
    """Why this PS refuses an incoming ring message (the transport maps it to a status code)."""

    def __init__(self, kind: str, message: str, version: int = 0) -> None:
        super().__init__(message)
        self.kind, self.message, self.version = kind, message, version


class RingTransport(Protocol):
    """How one PS reaches another; every method raises PeerError."""

    def send(self, peer: str, msg: RingMessage, timeout: float) -> None: ...

    def abort(self, peer: str, key: RingKey, timeout: float) -> str:
        """Ask `peer` to abort `key` unless it committed it; its answer (COMMITTED or ABORTED)."""
        ...


def chunk_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous slices covering [0, numel), as even as possible."""
    edges = [numel * i // parts for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def encode_chunk(values: np.ndarray, codec: str) -> bytes:
    """One chunk's compressed, self-describing bytes."""
    return pack(values, codec)


def decode_chunk(data: bytes, numel: int) -> np.ndarray:
    """Exactly `numel` float32 values from `encode_chunk`'s bytes; CodecError if they are anything else."""
    return unpack(data, numel)


class RingReducer:
    """The Reducer of one PS in a multi-PS federation (see the module docstring for the protocol)."""

    def __init__(self, me: str, groups: list[str], transport: RingTransport, *, timeout_s: float, retries: int,
                 codec: str, min_interval_s: float = 0.0, version: Callable[[], int] = lambda: 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if me not in groups:
            raise ValueError(f"this PS's group {me!r} is not one of the federation's: {', '.join(groups)}")
        self.me, self.groups = me, tuple(sorted(groups))
        self.transport, self.timeout_s, self.retries, self.codec = transport, timeout_s, retries, codec
        self.min_interval_s, self.version, self.clock = min_interval_s, version, clock
        self.members: tuple[str, ...] = self.groups  # who the next ring runs with (this PS's view)
        self.needs_sync = False  # this PS was excluded or fell behind: fetch the group's model first
        self.joining = False  # asked to (re)join; waiting for a committed ring to add it
        self.completed = 0  # ring all-reduces committed with at least one other PS
        self.last_ring_at = -float("inf")
        self._cond = threading.Condition()
        self._inbox: dict[tuple[RingKey, str, int, str], RingMessage] = {}
        self._state: dict[RingKey, str] = {}
        self._reducing: int | None = None
        self._candidates: set[str] = set()
        self._results: dict[RingKey, RoundSum] = {}

    @property
    def reducing(self) -> int | None:
        """The version whose round this PS is combining right now (None between rings)."""
        return self._reducing

    # ---- the Reducer protocol ------------------------------------------------------------------------

    def may_close(self, version: int) -> bool:
        if self.needs_sync or self.joining:
            return False
        return self.clock() - self.last_ring_at >= self.min_interval_s

    def wants_close(self, version: int) -> bool:
        """Another member already sent this PS a chunk for `version`: it waits for this PS's round sum."""
        if self.needs_sync or self.joining:
            return False
        with self._cond:
            if self._reducing == version:
                return False
            return any(k.version == version and self.me in k.members and self._state.get(k) is None
                       for k, *_ in self._inbox)

    def reduce(self, round_sum: RoundSum, version: int) -> RoundSum:
        if self.needs_sync or self.joining:
            raise ReduceFailed("ring_rejoining", "this PS is rejoining its group's ring; the round is dropped")
        with self._cond:
            self._reducing = version
            self._prune(version)
        try:
            return self._reduce(round_sum, version)
        finally:
            with self._cond:
                self._reducing = None

    def _reduce(self, round_sum: RoundSum, version: int) -> RoundSum:
        members, attempt = self.members, 0
        for _ in range(self.retries + 1):
            members, attempt = self._pick_attempt(version, members, attempt)
            if members == (self.me,):
                with self._cond:
                    joiners = set(self._candidates)
                self._committed(RingKey(version, members, attempt), members, joiners)
                return round_sum
            key = RingKey(version, members, attempt)
            try:
                return self._run(key, round_sum)
            except PeerError as exc:
                if exc.kind in ("ahead", "excluded"):  # the others moved on without this PS
                    self._abort_local(key)
                    self.needs_sync = True
                    raise ReduceFailed("ring_behind", f"{exc}; this PS resyncs from the group's model") from exc
                log.warning("event=ring_failed version=%d members=%s attempt=%d error=%r", version,
                            ",".join(members), attempt, str(exc))
                decided, survivors = self._recover(key)
                if decided is not None:
                    return decided
                members, attempt = tuple(m for m in members if m in survivors), attempt + 1
        raise ReduceFailed("ring_failed", f"the ring all-reduce for version {version} failed {self.retries + 1} "
                           "times; the round is dropped on every PS (none committed it)")

    def _pick_attempt(self, version: int, members: tuple[str, ...], attempt: int) -> tuple[tuple[str, ...], int]:
        """The attempt to run: one the others already started (their chunks wait in the inbox), else the
        next after any this PS has seen aborted, so a PS that arrives late joins the others' retry."""
        with self._cond:
            waiting = [k for k, *_ in self._inbox if k.version == version and self.me in k.members
                       and self._state.get(k) is None]
            if waiting:
                key = max(waiting, key=lambda k: k.attempt)
                return key.members, key.attempt
            aborted = [k.attempt + 1 for k, st in self._state.items() if k.version == version and st == ABORTED]
            return members, max([attempt, *aborted])

    # ---- one attempt ---------------------------------------------------------------------------------

    def _run(self, key: RingKey, rs: RoundSum) -> RoundSum:
        members, n = key.members, len(key.members)
        i = members.index(self.me)
        succ, pred = members[(i + 1) % n], members[(i - 1) % n]
        with self._cond:
            if self._state.get(key) == ABORTED:
                raise PeerError(self.me, "unreachable", "a partner aborted this ring before it started here")
            self._state[key] = RUNNING
        log.info("event=ring_start version=%d members=%s attempt=%d weight=%.1f", key.version, ",".join(members),
                 key.attempt, rs.weight)
        bounds = chunk_bounds(rs.delta.size, n)
        buf = rs.delta * np.float32(rs.weight) if rs.weight > 0 else np.zeros_like(rs.delta)
        meta = {self.me: (float(rs.weight), int(rs.count))}

        def part(j: int) -> slice:
            return slice(*bounds[j])

        for s in range(n - 1):  # reduce-scatter: Σ_m w_m·δ_m, one chunk per member
            j = (i - s) % n
            self._send(succ, RingMessage(key, self.me, SCATTER, s, encode_chunk(buf[part(j)], self.codec), dict(meta)))
            msg = self._receive(key, SCATTER, s, pred)
            j = (i - s - 1) % n
            buf[part(j)] += self._decode(msg, bounds[j])
            meta.update(msg.meta)
        if set(meta) != set(members):
            raise PeerError(pred, "refused", f"round weights of {sorted(set(members) - set(meta))} never arrived")
        total = sum(meta[m][0] for m in members)  # in member order: the same float on every PS
        own = (i + 1) % n
        mean = buf[part(own)] / np.float32(total) if total > 0 else np.zeros(bounds[own][1] - bounds[own][0],
                                                                              dtype=np.float32)
        payload = encode_chunk(mean.astype(np.float32), self.codec)
        buf[part(own)] = decode_chunk(payload, mean.size)  # the owner keeps exactly what the others receive
        for s in range(n - 1):  # all-gather: the owners' encoded bytes travel round unchanged
            self._send(succ, RingMessage(key, self.me, GATHER, s, payload))
            msg = self._receive(key, GATHER, s, pred)
            j = (i - s) % n
            buf[part(j)] = self._decode(msg, bounds[j])
            payload = msg.payload
        result = RoundSum(buf, sum(meta[m][1] for m in members), rs.clients, total)
        with self._cond:
            if self._state.get(key) == ABORTED:
                raise PeerError(self.me, "unreachable", "aborted by a partner's recovery")
            self._state[key] = "have_all"
            self._results[key] = result
            candidates = tuple(sorted(self._candidates))
        for peer in members:
            if peer != self.me:
                self._send(peer, RingMessage(key, self.me, DONE, 0, b"", {}, candidates))
        dones = [self._receive(key, DONE, 0, peer) for peer in members if peer != self.me]
        with self._cond:
            if self._state.get(key) == ABORTED:  # a partner's recovery got here first: nobody committed
                raise PeerError(self.me, "unreachable", "aborted by a partner's recovery before commit")
            self._state[key] = COMMITTED
            joiners = set(candidates).union(*(d.candidates for d in dones))
        self._committed(key, members, joiners)
        return result

    def _decode(self, msg: RingMessage, bounds: tuple[int, int]) -> np.ndarray:
        try:
            return decode_chunk(msg.payload, bounds[1] - bounds[0])
        except CodecError as exc:
            raise PeerError(msg.sender, "refused", f"sent a chunk that does not decode: {exc}") from exc

    def _send(self, peer: str, msg: RingMessage) -> None:
        self.transport.send(peer, msg, self.timeout_s)

    def _receive(self, key: RingKey, phase: str, step: int, sender: str) -> RingMessage:
        deadline = self.clock() + self.timeout_s
        slot = (key, phase, step, sender)
        with self._cond:
            while slot not in self._inbox:
                if self._state.get(key) == ABORTED:
                    raise PeerError(sender, "unreachable", "the ring was aborted by a partner")
                left = deadline - self.clock()
                if left <= 0:
                    raise PeerError(sender, "unreachable", f"sent nothing for {self.timeout_s:.0f} s ({phase} step "
                                    f"{step} of version {key.version}); timed out")
                self._cond.wait(min(left, 0.5))
            return self._inbox.pop(slot)

    def _committed(self, key: RingKey, members: tuple[str, ...], joiners: set[str] | tuple) -> None:
        with self._cond:
            self._state[key] = COMMITTED
            self._candidates -= set(joiners)
        new = tuple(sorted(set(members) | (set(joiners) & set(self.groups))))
        if len(members) > 1:
            self.completed += 1
        self.last_ring_at = self.clock()
        if new != self.members:
            log.info("event=ring_members version=%d members=%s", key.version + 1, ",".join(new))
        self.members = new
        log.info("event=ring_commit version=%d members=%s rings=%d", key.version, ",".join(members), self.completed)

    # ---- failure ------------------------------------------------------------------------------------

    def _abort_local(self, key: RingKey) -> str:
        with self._cond:
            state = self._state.get(key)
            if state != COMMITTED:
                self._state[key] = ABORTED
                self._cond.notify_all()
            return self._state[key]

    def _recover(self, key: RingKey) -> tuple[RoundSum | None, set[str]]:
        """After a failed attempt: did anyone commit it (then so do we), and who is still there?"""
        self._abort_local(key)
        survivors, committed = {self.me}, False
        for peer in key.members:
            if peer == self.me:
                continue
            try:
                answer = self.transport.abort(peer, key, min(self.timeout_s, 5.0))
            except PeerError as exc:
                log.warning("event=ring_exclude version=%d peer=%s reason=%r", key.version, peer, str(exc))
                continue
            survivors.add(peer)
            committed = committed or answer == COMMITTED
        if committed:
            with self._cond:
                result = self._results.get(key)
                self._state[key] = COMMITTED
            if result is None:  # impossible if the partner is honest: it committed without our DONE
                self.needs_sync = True
                raise ReduceFailed("ring_behind", "a partner committed a ring this PS never finished; resyncing")
            self._committed(key, key.members, ())
            log.info("event=ring_commit_by_recovery version=%d", key.version)
            return result, survivors
        self.members = tuple(m for m in key.members if m in survivors)
        return None, survivors

    # ---- what other PSs call (through the transport's server side) ---------------------------------

    def deliver(self, msg: RingMessage) -> None:
        """File an incoming ring message; RingRefused when this PS will not take part in that ring."""
        mine = self.version()
        if self.me not in msg.key.members or msg.sender not in msg.key.members:
            raise RingRefused("refused", f"{msg.sender!r} is not a member of ring {msg.key.members}")
        if msg.key.version < mine:
            raise RingRefused("ahead", f"this PS ({self.me}) is at version {mine}, past the ring's "
                              f"{msg.key.version}: resync from the group's model", mine)
        if msg.key.version == mine and not self.needs_sync and not self.joining and msg.sender not in self.members:
            raise RingRefused("excluded", f"{msg.sender!r} was excluded from the ring at version {mine}; it must "
                              "rejoin from the group's model", mine)
        with self._cond:
            state = self._state.get(msg.key)
            if state == ABORTED:  # the sender is behind on retries: it recovers and joins the next attempt
                raise RingRefused("refused", f"attempt {msg.key.attempt} of version {msg.key.version} was aborted "
                                  f"here ({self.me}); retry")
            if state == COMMITTED:
                return  # a late message of a finished attempt
            self._inbox[(msg.key, msg.phase, msg.step, msg.sender)] = msg
            if msg.key.version > mine:  # behind: a moment (mid-apply), or for good (then fetch the group's model)
                self.needs_sync = self.needs_sync or msg.key.version > mine + 1 or mine == 0 or self.joining
            self._cond.notify_all()

    def abort_request(self, key: RingKey) -> str:
        """Another member's recovery: abort `key` here unless it committed; COMMITTED or ABORTED."""
        return self._abort_local(key)

    def join_request(self, peer: str) -> None:
        """`peer` resynced from the group's model and asks to be in the next ring."""
        if peer not in self.groups:
            raise RingRefused("refused", f"{peer!r} is not a PS group of this federation")
        with self._cond:
            if peer not in self.members:
                self._candidates.add(peer)
        log.info("event=ring_join_request peer=%s", peer)

    def rejoined(self, members: tuple[str, ...]) -> None:
        """This PS adopted the group's model; `members` is the ring its source PS runs next."""
        self.members = tuple(sorted(members))
        self.needs_sync = False
        self.joining = self.me not in self.members

    def _prune(self, version: int) -> None:
        for slot in [s for s in self._inbox if s[0].version < version]:
            del self._inbox[slot]
        for key in [k for k in self._state if k.version < version - 4]:
            del self._state[key]
        self._results = {k: v for k, v in self._results.items() if k.version >= version}
