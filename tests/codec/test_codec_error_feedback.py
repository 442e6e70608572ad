"""Error feedback: summed decoded deltas track summed true deltas; a refused payload leaves the residual as it
was; state survives a weights-only checkpoint."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from geofed.codec import CodecError, ErrorFeedback, decoder_for, make_codec

from .conftest import heavy_tailed

N, ROUNDS = 20_000, 40


def decode(header: bytes, frames) -> np.ndarray:
    dec = decoder_for(header, max_numel=N)
    out = np.concatenate([v for f in frames for _, v in dec.feed(f)])
    dec.finish()
    return out


def deltas() -> list[np.ndarray]:
    """Heavy-tailed noise plus a small steady drift that int8's coarse global step rounds away."""
    drift = heavy_tailed(N, seed=99, scale=2e-4)
    return [heavy_tailed(N, seed=r) + drift for r in range(ROUNDS)]


@pytest.mark.parametrize("spec", [("int8", "huffman"), ("int8", "ans", 1024), ("int16", "huffman")])
def test_sum_of_decoded_deltas_tracks_the_truth_with_ef(spec: tuple) -> None:
    codec = make_codec(*spec)
    ef = ErrorFeedback(N)
    truth = np.zeros(N, np.float64)
    with_ef = np.zeros(N, np.float64)
    without = np.zeros(N, np.float64)
    for d in deltas():
        truth += d
        with_ef += decode(*ef.encode(codec, d, frame_elems=4096))
        ef.commit()
        without += decode(*codec.encode(d, frame_elems=4096))
    err_ef = np.linalg.norm(with_ef - truth)
    err_plain = np.linalg.norm(without - truth)
    assert err_ef == pytest.approx(np.linalg.norm(ef.residual), rel=1e-3)  # only the last residual is missing
    assert err_ef < 0.25 * err_plain, (err_ef, err_plain)


def test_fp32_leaves_no_residual() -> None:
    ef = ErrorFeedback(N)
    d = heavy_tailed(N)
    assert np.array_equal(decode(*ef.encode(make_codec("fp32"), d)), d)
    ef.commit()
    assert not ef.residual.any()


def test_state_survives_weights_only_checkpoint() -> None:
    codec = make_codec("int8", "huffman")
    ef = ErrorFeedback(N)
    ef.encode(codec, heavy_tailed(N, seed=1))
    ef.commit()
    buf = io.BytesIO()
    torch.save(ef.state_dict(), buf)
    buf.seek(0)
    restored = ErrorFeedback(N)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    assert np.array_equal(restored.residual, ef.residual)
    d = heavy_tailed(N, seed=2)
    h1, f1 = ef.encode(codec, d)
    h2, f2 = restored.encode(codec, d)
    assert h1 == h2 and list(f1) == list(f2)


def test_load_state_dict_validates() -> None:
    ef = ErrorFeedback(10)
    with pytest.raises(CodecError, match="exactly the key 'residual'"):
        ef.load_state_dict({"residual": torch.zeros(10), "x": 1})
    with pytest.raises(CodecError, match="float32 of shape"):
        ef.load_state_dict({"residual": torch.zeros(11)})
    with pytest.raises(CodecError, match="float32 of shape"):
        ef.load_state_dict({"residual": np.zeros(10, np.float64)})
    with pytest.raises(CodecError, match="non-finite"):
        ef.load_state_dict({"residual": torch.full((10,), float("nan"))})
    with pytest.raises(CodecError, match="delta must be a float32 array"):
        ef.encode(make_codec("int8"), np.zeros(9, np.float32))


def test_reset_clears_the_residual() -> None:
    ef = ErrorFeedback(N)
    ef.encode(make_codec("int8"), heavy_tailed(N))
    ef.commit()
    assert ef.residual.any()
    ef.reset()
    assert not ef.residual.any()


def test_refused_payload_leaves_the_residual_as_it_was() -> None:
    """Prepare a residual from one taken push; encode a second delta; the PS refuses it (stale)."""
    # Prepare
    codec = make_codec("int8", "huffman")
    ef = ErrorFeedback(N)
    ef.encode(codec, heavy_tailed(N, seed=1))
    ef.commit()
    before = ef.residual.copy()

    # Execute
    _ = list(ef.encode(codec, heavy_tailed(N, seed=2))[1])
    ef.discard()

    # Assert: bit for bit the residual of the first push, as if the second had never been encoded.
    assert before.any() and np.array_equal(ef.residual, before)
    assert ef.staged is None


def test_taken_payload_commits_exactly_what_quantisation_lost() -> None:
    """The committed residual is (delta + old residual) - what the PS decodes, computed here by decoding."""
    # Prepare
    codec = make_codec("int8", "huffman")
    ef = ErrorFeedback(N)
    ef.encode(codec, heavy_tailed(N, seed=1))
    ef.commit()
    old, d = ef.residual.copy(), heavy_tailed(N, seed=2)

    # Execute
    decoded = decode(*ef.encode(codec, d))
    unsettled = ef.residual.copy()
    ef.commit()

    # Assert: untouched until commit, then the independent residual.
    assert np.array_equal(unsettled, old)
    np.testing.assert_allclose(ef.residual, (d + old) - decoded, atol=1e-6)


def test_unsettled_payload_survives_a_checkpoint() -> None:
    """A checkpoint written before the push holds both residuals; the relaunch settles it either way."""
    codec = make_codec("int8", "huffman")
    ef = ErrorFeedback(N)
    ef.encode(codec, heavy_tailed(N, seed=1))
    ef.commit()
    ef.encode(codec, heavy_tailed(N, seed=2))
    buf = io.BytesIO()
    torch.save(ef.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)

    refused, taken = ErrorFeedback(N), ErrorFeedback(N)
    refused.load_state_dict(state)
    taken.load_state_dict(state)
    refused.discard()
    taken.commit()

    assert np.array_equal(refused.residual, ef.residual)
    assert np.array_equal(taken.residual, ef.staged)
