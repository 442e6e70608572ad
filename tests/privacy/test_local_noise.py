"""Local DP on the client: the update is clipped and noised before the codec, and error feedback carries the noised
update's quantisation residual, so what leaves the site over several rounds keeps its noise."""

from __future__ import annotations

import numpy as np
import pytest

from client_agent.training.privacy import local_noise, refuse_slice_wise
from geofed.codec import ErrorFeedback, decoder_for, make_codec
from geofed.privacy.settings import PrivacyConfig

N = 50_000
LOCAL = PrivacyConfig(enabled=True, mode="local", noise_multiplier=0.5, clip_norm=2.0)


def test_off_or_central_the_update_is_encoded_as_it_is():
    delta = np.ones(N, np.float32)
    assert local_noise(PrivacyConfig(), delta) is delta
    assert local_noise(PrivacyConfig(enabled=True, noise_multiplier=1.0), delta) is delta  # central: the PS's job


def test_local_clips_to_c_and_adds_sigma_c_noise():
    rng = np.random.default_rng(0)
    delta = rng.standard_normal(N).astype(np.float32) * 10  # norm ≈ 2236, clipped to 2
    out = local_noise(LOCAL, delta, np.random.default_rng(1))
    clipped = delta.astype(np.float64) * (2.0 / np.linalg.norm(delta.astype(np.float64)))
    noise = out - clipped
    assert np.std(noise) == pytest.approx(0.5 * 2.0, rel=0.02)  # σ·C per element
    assert out is not delta and np.linalg.norm(delta) > 2000  # the caller's δ is left as it was


def _decoded(header: bytes, frames) -> np.ndarray:
    dec = decoder_for(header, max_numel=N)
    out = np.concatenate([v for f in frames for _, v in dec.feed(f)])
    dec.finish()
    return out.astype(np.float64)


def test_error_feedback_carries_the_noised_residual_so_the_noise_is_not_undone():
    # A site whose true update is 0 every round: all it may reveal is noise. With the residual computed against
    # the noised update, the sum of what it sent over R rounds is Σ noise (minus the last residual); a residual
    # computed against the raw update would carry −noise into the next round and the sum would fall back to 0.
    codec, ef = make_codec("int8"), ErrorFeedback(N)
    rng, rounds = np.random.default_rng(2), 4
    sent_total = np.zeros(N, np.float64)
    noise_total = np.zeros(N, np.float64)
    for _ in range(rounds):
        noised = local_noise(LOCAL, np.zeros(N, np.float32), rng)
        noise_total += noised
        before = ef.residual.astype(np.float64)
        sent = _decoded(*ef.encode(codec, noised))
        ef.commit()
        np.testing.assert_allclose(ef.residual, noised + before - sent, atol=1e-5)  # against the noised update
        sent_total += sent
    # Telescoping: Σ sent = Σ noised − final residual (less than half a quantisation step per element)
    np.testing.assert_allclose(sent_total + ef.residual, noise_total, atol=1e-4)
    assert np.std(sent_total) == pytest.approx(0.5 * 2.0 * np.sqrt(rounds), rel=0.05)


def test_the_slice_wise_path_refuses_local_dp():
    refuse_slice_wise(PrivacyConfig(enabled=True, noise_multiplier=1.0))  # central: fine
    with pytest.raises(ValueError, match="slice-wise sync path"):
        refuse_slice_wise(LOCAL)
