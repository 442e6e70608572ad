"""Streaming decoder: accepts the payload in pieces of any size and yields values frame by frame.

Each frame's prefix is validated as soon as its 20 bytes are in (position, element count, body size
against the most a valid frame could need), so a hostile sender cannot make the receiver buffer or
allocate more than one honest frame's worth before being rejected. Pieces are queued, not concatenated:
a frame that arrives whole is decoded straight from its piece, and one split across pieces is joined
once, so feeding tiny pieces stays linear in the payload size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

from geofed.codec.base import FrameDecoder
from geofed.codec.errors import CodecError
from geofed.codec.header import FRAME_PREFIX, parse_frame_prefix


class _ByteQueue:
    """FIFO of immutable byte pieces with zero-copy takes when a request fits in the first piece."""

    def __init__(self) -> None:
        self._pieces: deque[memoryview] = deque()
        self.size = 0

    def push(self, data: bytes) -> None:
        if data:
            self._pieces.append(memoryview(data))
            self.size += len(data)

    def peek(self, n: int) -> bytes:
        """The first `n` bytes (n <= size), without consuming them."""
        out, need = [], n
        for piece in self._pieces:
            out.append(piece[:need])
            need -= len(out[-1])
            if not need:
                break
        return b"".join(out)

    def take(self, n: int) -> memoryview | bytes:
        """Consume the first `n` bytes (n <= size)."""
        self.size -= n
        first = self._pieces[0]
        if len(first) >= n:
            if len(first) == n:
                self._pieces.popleft()
            else:
                self._pieces[0] = first[n:]
            return first[:n]
        out = bytearray()
        while len(out) < n:
            piece = self._pieces.popleft()
            need = n - len(out)
            out += piece[:need]
            if len(piece) > need:
                self._pieces.appendleft(piece[need:])
        return bytes(out)


class StreamDecoder:
    """Decodes one stream whose header has been parsed by `decoder_for`.

    `feed(data)` queues `data` at once and returns an iterator of (offset, float32 values) for every
    frame completed so far; consume it before the next `feed`. `finish()` checks nothing is missing.
    After any CodecError the decoder refuses further input.
    """

    def __init__(self, codec_name: str, numel: int, frame_elems: int, frames: FrameDecoder, *,
                 lossless: bool = False) -> None:
        self.codec_name = codec_name
        self.lossless = lossless  # the stream's codec can carry a first model (`CodecSpec.lossless`)
        self.numel = numel
        self.frame_elems = frame_elems
        self._frames = frames
        self._queue = _ByteQueue()
        self._frame_len: int | None = None  # prefix + body of the frame being assembled
        self._frame_at = (0, 0)  # (offset, count) of that frame
        self._done = 0  # elements decoded so far
        self._failed: CodecError | None = None

    @property
    def decoded(self) -> int:
        """Elements decoded so far."""
        return self._done

    @property
    def sparse(self) -> bool:
        """True when frames can be decoded to (positions, values) with `feed_sparse` (the sparse codec)."""
        return hasattr(self._frames, "decode_sparse")

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[int, np.ndarray]]:
        self._queue_data(data)
        return self._drain(self._frames.decode)

    def feed_sparse(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
        """Like `feed`, yielding (offset, (absolute positions, values)) per frame: work O(nonzeros)."""
        if not self.sparse:
            raise self._fail(CodecError(f"codec {self.codec_name} has no sparse decoding"))
        self._queue_data(data)
        return self._drain(self._frames.decode_sparse)

    def _queue_data(self, data: bytes | bytearray | memoryview) -> None:
        self._check_alive()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise self._fail(CodecError(f"feed() takes bytes, got {type(data).__name__}"))
        if len(data) and self._done == self.numel:
            raise self._fail(CodecError(f"{len(data)} bytes of data after the last frame"))
        self._queue.push(data if isinstance(data, bytes) else bytes(data))  # callers may reuse buffers

    def finish(self) -> None:
        """CodecError unless exactly `numel` elements arrived and no bytes are left over."""
        self._check_alive()
        pending = self._queue.size
        if self._done < self.numel:
            raise self._fail(
                CodecError(
                    f"truncated payload: decoded {self._done} of {self.numel} elements"
                    + (f" ({pending} bytes of an incomplete frame buffered)" if pending else "")
                )
            )
        if pending:
            raise self._fail(CodecError(f"{pending} bytes of data after the last frame"))

    def _drain(self, decode) -> Iterator[tuple[int, np.ndarray]]:
        while True:
            self._check_alive()
            if self._done == self.numel:
                if self._queue.size:
                    raise self._fail(CodecError(f"{self._queue.size} bytes of data after the last frame"))
                return
            try:
                if self._frame_len is None:
                    if self._queue.size < FRAME_PREFIX.size:
                        return
                    body_len, offset, count = parse_frame_prefix(self._queue.peek(FRAME_PREFIX.size))
                    self._check_prefix(body_len, offset, count)
                    self._frame_len, self._frame_at = FRAME_PREFIX.size + body_len, (offset, count)
                if self._queue.size < self._frame_len:
                    return
                frame = self._queue.take(self._frame_len)
                offset, count = self._frame_at
                self._frame_len = None
                values = decode(offset, count, frame[FRAME_PREFIX.size :])
            except CodecError as exc:
                raise self._fail(exc) from None
            self._done += count
            yield offset, values

    def _check_prefix(self, body_len: int, offset: int, count: int) -> None:
        remaining = self.numel - self._done
        if offset != self._done:
            raise CodecError(f"frame starts at element {offset}, expected {self._done} (out of order?)")
        if count > remaining:
            raise CodecError(f"frame claims {count} elements but only {remaining} of {self.numel} remain")
        expected = min(self.frame_elems, remaining)
        if count != expected:
            raise CodecError(f"frame at {offset} holds {count} elements, expected {expected}")
        limit = self._frames.max_body_bytes(offset, count)
        if body_len > limit:
            raise CodecError(f"frame at {offset} claims a {body_len}-byte body; {count} elements need at most {limit}")

    def _check_alive(self) -> None:
        if self._failed is not None:
            raise CodecError(f"decoder already failed: {self._failed}")

    def _fail(self, exc: CodecError) -> CodecError:
        self._failed = exc
        return exc
