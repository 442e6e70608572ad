"""A slice of the flat vector encoded on its own (issue 18): the ranks' frames are the one-rank stream.

"Ranks" here are threads sharing an agreement through a barrier, so the codec's side is checked
in-process for every codec; `tests/client/test_client_slices.py` runs the same over gloo ranks.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from geofed.codec import CodecError, ErrorFeedback, decoder_for, make_codec
from geofed.codec.base import Codec
from geofed.codec.sharded import SliceCodec

FRAME = 1000


class ThreadAgreement:
    """`Agreement` among `n` threads: each call waits for all, then every thread gets the reduction."""

    def __init__(self, n: int) -> None:
        self.n, self.barrier, self.lock = n, threading.Barrier(n), threading.Lock()
        self.values: list[np.ndarray] = []

    def _reduce(self, values: np.ndarray, op) -> np.ndarray:
        with self.lock:
            self.values.append(np.array(values))
        self.barrier.wait()
        out = op(np.stack(self.values), axis=0)
        self.barrier.wait()
        with self.lock:
            self.values.clear()
        self.barrier.wait()
        return out

    def max(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(values, np.max)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return self._reduce(values, np.sum)


def encode_by_ranks(codec: Codec, flat: np.ndarray, cuts: list[int], residuals: list[np.ndarray] | None = None):
    """Encode flat[cuts[r]:cuts[r+1]] on one thread per rank; (headers, frames per rank, staged residuals)."""
    n = len(cuts) - 1
    agree = ThreadAgreement(n)
    headers, frames, staged, errors = [None] * n, [None] * n, [None] * n, [None] * n

    def rank(r: int) -> None:
        try:
            piece = flat[cuts[r] : cuts[r + 1]]
            sliced = SliceCodec(codec, cuts[r], flat.size, agree)
            if residuals is None:
                headers[r], it = sliced.encode(piece, frame_elems=FRAME)
            else:
                ef = ErrorFeedback(piece.size)
                ef.residual[:] = residuals[r]
                headers[r], it = ef.encode(sliced, piece, frame_elems=FRAME)
                staged[r] = ef.staged
            frames[r] = list(it)
        except CodecError as exc:
            errors[r] = exc

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a rank is stuck waiting for the others"
    return headers, frames, staged, errors


def decode(header: bytes, frames: list[bytes], numel: int) -> np.ndarray:
    dec = decoder_for(header, max_numel=numel)
    out = np.full(numel, np.nan, np.float32)
    for offset, values in dec.feed(b"".join(frames)):
        out[offset : offset + values.size] = values
    dec.finish()
    return out


@pytest.fixture(scope="module")
def delta() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(10_500).astype(np.float32) * 0.01
    x[7_777] = 0.5  # the global max lives on the last rank only: the header's range must be agreed
    return x


@pytest.mark.parametrize(("name", "entropy", "block"), [
    ("int8", "huffman", 0), ("int16", "ans", 0), ("int8", "none", 0), ("int8", "huffman", 500), ("fp32", "", 0),
    ("bf16", "", 0),
])
def test_ranks_frames_in_rank_order_are_the_one_rank_stream(delta, name, entropy, block):
    # Prepare: an uneven, frame-aligned split over 3 ranks (4, 4 and 2.5 frames) and per-rank residuals.
    codec = make_codec(name, entropy or "huffman", block)
    cuts = [0, 4000, 8000, delta.size]
    residuals = [np.linspace(-1e-3, 1e-3, b - a, dtype=np.float32) for a, b in zip(cuts, cuts[1:], strict=False)]

    # Execute
    headers, frames, staged, errors = encode_by_ranks(codec, delta, cuts, residuals)

    # Assert: one header on every rank; the concatenated frames are byte for byte the one-rank encoding of
    # delta + residual, so today's decoder reads them; the ranks' residuals are the one-rank residual.
    assert errors == [None] * 3
    ef = ErrorFeedback(delta.size)
    ef.residual[:] = np.concatenate(residuals)
    ref_header, ref_frames = ef.encode(codec, delta, frame_elems=FRAME)
    assert headers == [ref_header] * 3
    assert b"".join(f for fs in frames for f in fs) == b"".join(ref_frames)
    np.testing.assert_array_equal(np.concatenate(staged), ef.staged)
    got = decode(headers[0], [f for fs in frames for f in fs], delta.size)
    corrected = delta + np.concatenate(residuals)
    if name == "fp32":
        np.testing.assert_array_equal(got, corrected)  # independent of the codec: lossless is exact
    else:
        assert np.abs(got - corrected).max() <= (corrected.max() - corrected.min()) / 255 / 2 * 1.001 + 1e-9


def test_a_rank_with_no_frames_takes_part_and_sends_nothing(delta):
    cuts = [0, 6000, delta.size, delta.size]  # the third rank owns nothing
    headers, frames, _, errors = encode_by_ranks(make_codec("int8"), delta, cuts)
    ref_header, ref_frames = make_codec("int8").encode(delta, frame_elems=FRAME)
    assert errors == [None] * 3 and frames[2] == []
    assert headers == [ref_header] * 3 and b"".join(frames[0] + frames[1]) == b"".join(ref_frames)


def test_a_non_finite_value_on_one_rank_fails_every_rank_and_none_hangs(delta):
    bad = delta.copy()
    bad[9_000] = np.nan  # on the last rank only
    _, _, _, errors = encode_by_ranks(make_codec("int8"), bad, [0, 4000, 8000, bad.size])
    assert all(isinstance(e, CodecError) and "non-finite" in str(e) for e in errors), errors


def test_a_misaligned_slice_on_one_rank_fails_every_rank_and_none_hangs(delta):
    _, _, _, errors = encode_by_ranks(make_codec("int8"), delta, [0, 4500, 8000, delta.size])
    assert "frame boundaries" in str(errors[0]) and "frame boundaries" in str(errors[1])
    assert "another rank's slice" in str(errors[2])


@pytest.mark.parametrize(("start", "size", "message"), [
    (500, 1000, "frame boundaries"),  # starts mid-frame: its first frame would straddle two ranks
    (0, 1500, "frame boundaries"),  # ends mid-frame before the end of the vector
    (10_000, 1000, "outside"),  # runs past the vector
])
def test_a_misaligned_or_outside_slice_is_refused(start, size, message):
    sliced = SliceCodec(make_codec("int8"), start, 10_500, ThreadAgreement(1))
    with pytest.raises(CodecError, match=message):
        sliced.encode(np.zeros(size, np.float32), frame_elems=FRAME)


def test_a_slice_cutting_a_range_block_is_refused():
    sliced = SliceCodec(make_codec("int8", "huffman", 3000), 2000, 10_500, ThreadAgreement(1))
    with pytest.raises(CodecError, match="block boundaries"):
        sliced.encode(np.zeros(2000, np.float32), frame_elems=FRAME)


def test_a_codec_without_a_slice_wise_encoder_is_refused():
    class Other(Codec):
        name = "other"

        def encode(self, flat, *, frame_elems=FRAME, residual_out=None):
            raise AssertionError("not reached")

    with pytest.raises(CodecError, match="no slice-wise encoder"):
        SliceCodec(Other(), 0, 10, ThreadAgreement(1))


@pytest.mark.parametrize("name", ["int8", "int16", "fp32", "bf16"])
def test_slices_cut_at_a_sharded_ps_bounds_give_the_one_rank_stream(name):
    """A sharded PS needs frames to end at its shard bounds too (`cuts`): ranks whose slices start on the frame
    grid, cut at the bounds inside them, must give the whole vector's stream cut the same way, byte for byte."""
    flat = np.random.default_rng(3).standard_normal(4 * FRAME + 321).astype(np.float32)
    bounds = [1500, 2999, 4100]  # inside rank slices and off the frame grid, as tensor boundaries fall
    codec = make_codec(name)
    want_header, want = codec.encode(flat, frame_elems=FRAME, cuts=bounds)
    want = list(want)
    agree = ThreadAgreement(2)
    out: list = [None, None]

    def rank(r: int, a: int, b: int) -> None:
        header, frames = SliceCodec(codec, a, flat.size, agree).encode(flat[a:b], frame_elems=FRAME, cuts=bounds)
        out[r] = (header, list(frames))

    threads = [threading.Thread(target=rank, args=(0, 0, 2 * FRAME)),
               threading.Thread(target=rank, args=(1, 2 * FRAME, flat.size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert out[0][0] == out[1][0] == want_header
    assert out[0][1] + out[1][1] == want
    assert len(want) == 5 + len(bounds)  # the grid's frames, each bound adding one
