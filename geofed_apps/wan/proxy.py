"""A user-space WAN link: a TCP proxy on localhost that delays, paces and breaks traffic like a bad WAN.

These machines have no kernel netem, yet the PS and its clients must be tested over links like the
paper's (§I: slow, jittery, asymmetric, breaking mid-transfer; §III-C2: tens of MB/s, seconds of RTT).
`WanProxy` sits between one client and the PS; each direction of each connection is a paced reader
feeding an order-keeping delay line, and the proxy's two token buckets (up, down) are shared by all
its connections, so one proxy is one link. An asyncio loop in a background thread does the work.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, TypeVar

from geofed_apps.wan.pacing import DelayLine, TokenBucket, burst_for, chunk_size_for, in_flight_limit
from geofed_apps.wan.profile import LinkProfile, Outage

log = logging.getLogger(__name__)

Direction = Literal["up", "down"]
_T = TypeVar("_T")
_CALL_TIMEOUT_S = 10.0
_BLACKHOLE_SLACK_S = 1e-3


@dataclass(frozen=True)
class WanStats:
    """What crossed the link so far; a snapshot, safe to read from any thread."""

    bytes_up: int
    """Bytes delivered client→PS."""
    bytes_down: int
    """Bytes delivered PS→client."""
    connections: int
    """Connections accepted since start."""
    active: int
    """Connections open now."""
    resets: int
    """Connections torn down (or refused) by reset outages."""
    blackholes: int
    """Blackhole periods begun."""


class _Connection:
    """One proxied TCP connection: its client side, its upstream side once dialled, and its task."""

    def __init__(self, client: asyncio.StreamWriter, task: asyncio.Task[None] | None) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.task = task

    def abort(self, *, rst: bool) -> None:
        """Drop both sides at once; with `rst` the peers see ECONNRESET, as after a WAN cut."""
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            if rst:
                _arm_rst(writer)
            writer.transport.abort()

    def close(self) -> None:
        """Close both sides gracefully: anything still buffered is flushed first."""
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()


def _arm_rst(writer: asyncio.StreamWriter) -> None:
    """Make the next close send RST instead of FIN (SO_LINGER on, timeout 0)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already closed: nothing left to reset


class _Pipe:
    """One direction of one connection: paced reads, then timed, order-keeping writes."""

    def __init__(
        self,
        proxy: WanProxy,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: Direction,
    ) -> None:
        self._proxy, self._conn, self._direction = proxy, conn, direction
        self._reader, self._writer = reader, writer
        self._delay = DelayLine(proxy._rng)
        self._queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        self._in_flight = 0
        self._space = asyncio.Event()
        self._broken = False

    async def run(self) -> None:
        """Carry bytes until EOF has been delivered, or either side fails (then reset the connection)."""
        deliver = asyncio.create_task(self._deliver())
        try:
            try:
                await self._intake()
            except (ConnectionError, OSError):
                self._conn.abort(rst=True)  # the sender reset: pass the reset on
                return
            await deliver
        finally:
            deliver.cancel()  # no-op once done; stops a pending delivery when we are cancelled

    async def _intake(self) -> None:
        proxy, loop = self._proxy, asyncio.get_running_loop()
        while not self._broken:
            await proxy._link_up.wait()  # blackhole: stop reading, so the sender's buffers fill
            bucket = proxy._buckets[self._direction]
            size = bucket.read_size(chunk_size_for(proxy._rate(self._direction)), loop.time())
            data = await self._reader.read(size)
            now, profile = loop.time(), proxy._profile
            departed = bucket.reserve(len(data), now) if data else now
            latency_s, jitter_s = profile.latency_ms / 1e3, profile.jitter_ms / 1e3
            release = self._delay.release_at(departed, latency_s, jitter_s)
            self._queue.put_nowait((release, data or None))
            if not data:
                return  # EOF travels the delay line too, behind the last byte
            self._in_flight += len(data)
            if departed > now:
                await asyncio.sleep(departed - now)  # the bottleneck is busy until then
            limit = in_flight_limit(proxy._rate(self._direction), latency_s, jitter_s)
            while self._in_flight > limit and not self._broken:
                self._space.clear()
                await self._space.wait()

    async def _deliver(self) -> None:
        proxy, loop = self._proxy, asyncio.get_running_loop()
        try:
            while True:
                release, data = await self._queue.get()
                wait = release - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await proxy._link_up.wait()  # blackhole: hold, deliver everything once it lifts
                if data is None:
                    if self._writer.can_write_eof():
                        self._writer.write_eof()
                    return
                self._writer.write(data)
                await self._writer.drain()
                self._in_flight -= len(data)
                self._space.set()
                proxy._delivered[self._direction] += len(data)
                if proxy.on_delivered is not None:
                    proxy.on_delivered(self._direction, proxy._delivered[self._direction])
        except (ConnectionError, OSError):
            self._broken = True
            self._space.set()
            self._conn.abort(rst=True)  # the receiver is gone: reset the sender too


class WanProxy:
    """Forward `listen_host:listen_port` to `target_host:target_port` under a `LinkProfile`.

    Note:
        Up is client→target, down is target→client. Outages in the profile are timed from `start()`;
        `trigger_reset` and `blackhole` inject them on demand. All public methods are thread-safe.
        Latency applies to data, not to the TCP handshake, which the local kernel completes at once.

    Args:
        target_host: host of the real service (the PS).
        target_port: its port.
        profile: link conditions; replace at run time with `set_profile`.
        listen_host: address to listen on.
        listen_port: port to listen on; 0 picks a free one (see the return value of `start`).
        on_delivered: called in the proxy's thread each time bytes are handed to the other side, with the
            direction ("up" or "down") and the bytes delivered that way so far; it must return quickly.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        profile: LinkProfile,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        on_delivered: Callable[[Direction, int], None] | None = None,
    ) -> None:
        if not isinstance(profile, LinkProfile):
            raise TypeError(f"profile must be a LinkProfile, got {type(profile).__name__}")
        for name, port in (("target_port", target_port), ("listen_port", listen_port)):
            if not 0 <= port <= 65535 or (name == "target_port" and port == 0):
                raise ValueError(f"{name} must be a TCP port (1-65535; listen_port may be 0), got {port}")
        self.target = (target_host, target_port)
        self.on_delivered = on_delivered
        self.listen_host = listen_host
        self._listen_port = listen_port
        self._profile = profile
        self._rng = random.Random(profile.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._conns: set[_Connection] = set()
        self._delivered: dict[Direction, int] = {"up": 0, "down": 0}
        self._accepted = self._resets = self._blackholes = 0
        self._started_at = 0.0
        self._outage_timers: list[asyncio.TimerHandle] = []
        self._blackhole_until = float("-inf")
        self._refuse_until = float("-inf")
        self._link_up = asyncio.Event()  # cleared while blackholed; binds to the loop on first use
        self._link_up.set()
        now = time.monotonic()  # the clock of asyncio's loop.time()
        self._buckets: dict[Direction, TokenBucket] = {
            d: TokenBucket(self._rate(d), burst_for(self._rate(d)), now) for d in ("up", "down")
        }

    # ----------------------------------------------------------------------------- lifecycle

    def start(self) -> int:
        """Bind, start the loop thread, schedule the profile's outages; return the bound port."""
        if self._thread is not None:
            raise RuntimeError("WanProxy already started; a proxy runs once (make a new one)")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._run_loop, name=f"wan-proxy->{self.target}", daemon=True)
        self._thread.start()
        try:
            self._port = asyncio.run_coroutine_threadsafe(self._open(), loop).result(_CALL_TIMEOUT_S)
        except BaseException:
            self._halt_loop()
            raise
        log.info(
            "wan proxy %s:%d -> %s:%d [%s]",
            self.listen_host,
            self._port,
            *self.target,
            self._profile.shorthand(),
        )
        return self._port

    def stop(self) -> None:
        """Close the listener and every connection, then end the loop thread; safe to call twice."""
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(_CALL_TIMEOUT_S)
        finally:
            self._halt_loop()

    def __enter__(self) -> WanProxy:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port clients should dial (after `start`)."""
        if self._port is None:
            raise RuntimeError("WanProxy is not started; call start() first")
        return self._port

    @property
    def profile(self) -> LinkProfile:
        """The conditions in force now."""
        return self._profile

    @property
    def stats(self) -> WanStats:
        """Counters so far (a snapshot)."""
        return WanStats(
            bytes_up=self._delivered["up"],
            bytes_down=self._delivered["down"],
            connections=self._accepted,
            active=len(self._conns),
            resets=self._resets,
            blackholes=self._blackholes,
        )

    # ----------------------------------------------------------------------------- control

    def set_profile(self, profile: LinkProfile) -> None:
        """Change conditions now; its outages still ahead (timed from `start`) replace the pending ones."""
        if not isinstance(profile, LinkProfile):
            raise TypeError(f"profile must be a LinkProfile, got {type(profile).__name__}")
        if self._loop is None:
            self._profile = profile
            return
        self._call(self._apply_profile, profile)

    def trigger_reset(self, refuse_s: float = 0.0) -> None:
        """Reset every live connection now; for `refuse_s` seconds new ones are reset on arrival too."""
        if refuse_s < 0:
            raise ValueError(f"refuse_s must be >= 0, got {refuse_s}")
        self._call(self._reset, refuse_s)

    def blackhole(self, seconds: float) -> None:
        """Deliver nothing for `seconds` (bytes are held, new connections hang), then resume."""
        if seconds <= 0:
            raise ValueError(f"a blackhole needs seconds > 0, got {seconds}")
        self._call(self._start_blackhole, seconds)

    # ----------------------------------------------------------------------------- loop side

    def _run_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _halt_loop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CALL_TIMEOUT_S)

    def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        """Run `fn(*args)` on the loop thread and return its result (directly if already there)."""
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            raise RuntimeError("WanProxy is not running; call start() first")
        if threading.current_thread() is self._thread:
            return fn(*args)

        async def call() -> _T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), loop).result(_CALL_TIMEOUT_S)

    async def _open(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(
            self._serve, self.listen_host, self._listen_port, limit=2 * chunk_size_for(0)
        )
        self._started_at = loop.time()
        self._schedule_outages(self._profile.outages)
        return self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        for timer in self._outage_timers:
            timer.cancel()
        if self._server is not None:
            self._server.close()
        tasks = [c.task for c in self._conns if c.task is not None]
        for conn in list(self._conns):
            conn.abort(rst=False)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _rate(self, direction: Direction) -> int:
        return self._profile.up_bytes_per_s if direction == "up" else self._profile.down_bytes_per_s

    def _apply_profile(self, profile: LinkProfile) -> None:
        now = asyncio.get_running_loop().time()
        self._profile = profile
        for direction, bucket in self._buckets.items():
            bucket.set_rate(self._rate(direction), burst_for(self._rate(direction)), now)
        for timer in self._outage_timers:
            timer.cancel()
        self._schedule_outages(profile.outages_after(now - self._started_at))

    def _schedule_outages(self, outages: tuple[Outage, ...]) -> None:
        loop = asyncio.get_running_loop()
        self._outage_timers = [loop.call_at(self._started_at + o.at_s, self._fire, o) for o in outages]

    def _fire(self, outage: Outage) -> None:
        log.info("wan proxy :%s outage %s", self._port, outage.shorthand())
        if outage.kind == "reset":
            self._reset(outage.duration_s)
        else:
            self._start_blackhole(outage.duration_s)

    def _reset(self, refuse_s: float) -> None:
        self._refuse_until = max(self._refuse_until, asyncio.get_running_loop().time() + refuse_s)
        for conn in list(self._conns):
            conn.abort(rst=True)
            if conn.task is not None:
                conn.task.cancel()
            self._resets += 1

    def _start_blackhole(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._blackhole_until = max(self._blackhole_until, loop.time() + seconds)
        self._blackholes += 1
        self._link_up.clear()
        loop.call_at(self._blackhole_until, self._maybe_end_blackhole)

    def _maybe_end_blackhole(self) -> None:
        if asyncio.get_running_loop().time() >= self._blackhole_until - _BLACKHOLE_SLACK_S:
            self._link_up.set()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        conn = _Connection(client_writer, asyncio.current_task())
        self._accepted += 1
        if loop.time() < self._refuse_until:
            conn.abort(rst=True)
            self._resets += 1
            return
        self._conns.add(conn)
        try:
            await self._link_up.wait()  # a blackholed link: the connection hangs before reaching the PS
            try:
                upstream_reader, conn.upstream = await asyncio.open_connection(
                    *self.target, limit=2 * chunk_size_for(0)
                )
            except OSError as exc:
                log.warning("wan proxy :%s cannot reach %s:%d: %s", self._port, *self.target, exc)
                conn.abort(rst=True)
                return
            await asyncio.gather(
                _Pipe(self, conn, client_reader, conn.upstream, "up").run(),
                _Pipe(self, conn, upstream_reader, client_writer, "down").run(),
            )
        except asyncio.CancelledError:
            pass  # reset or stop: the transports are already aborted
        finally:
            self._conns.discard(conn)
            conn.close()  # both directions delivered their EOF, or were aborted already
