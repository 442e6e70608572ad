"""A push is decoded once at the PS while a memory budget allows, and again from its spool beyond it."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from geofed.codec import decoder_for, make_codec
from ps_server import ingest
from ps_server.ingest import PushHeader, PushReceiver

NUMEL = 300_000


def _received(values: np.ndarray):
    header, frames = make_codec("int8", "huffman").encode(values)
    payload = b"".join(frames)
    receiver = PushReceiver(client_id="c.a", expected_numel=values.size, max_upload_bytes=1 << 30,
                            max_init_numel=values.size)
    receiver.on_header(PushHeader(base_version=1, upload_id="u1", codec_header=header, payload_bytes=len(payload)))
    for off in range(0, len(payload), 65_536):
        receiver.on_payload(off, payload[off : off + 65_536])
    return receiver.on_trailer(hashlib.sha256(payload).digest()), header, payload


def _reference(header: bytes, payload: bytes) -> np.ndarray:
    dec, out = decoder_for(header, max_numel=NUMEL), np.empty(NUMEL, np.float32)
    for off, vals in dec.feed(payload):
        out[off : off + vals.size] = vals
    dec.finish()
    return out


def _folded(push) -> np.ndarray:
    out = np.full(push.numel, np.nan, np.float32)
    for off, vals in push.iter_values(push.numel):
        out[off : off + vals.size] = vals
    return out


@pytest.fixture
def delta() -> np.ndarray:
    return (np.random.default_rng(0).standard_t(3.0, NUMEL) * 1e-3).astype(np.float32)


def test_within_the_budget_the_fold_reads_the_values_decoded_on_arrival(delta, monkeypatch):
    # Prepare
    free = ingest.KEPT_DECODED.free
    push, header, payload = _received(delta)

    # Execute: a second decode would now fail loudly
    monkeypatch.setattr(ingest, "decoder_for", lambda *a, **k: pytest.fail("the push was decoded twice"))
    got = _folded(push)

    # Assert
    assert np.array_equal(got, _reference(header, payload))
    assert ingest.KEPT_DECODED.free == free - 4 * NUMEL
    push.close()
    assert ingest.KEPT_DECODED.free == free


def test_beyond_the_budget_the_spool_is_decoded_again_to_the_same_values(delta, monkeypatch):
    monkeypatch.setattr(ingest, "KEPT_DECODED", ingest._Budget(4 * NUMEL - 1))
    push, header, payload = _received(delta)

    assert push.values is None
    assert np.array_equal(_folded(push), _reference(header, payload))
    push.close()


def test_an_aborted_push_gives_its_budget_back(delta, monkeypatch):
    budget = ingest._Budget(1 << 30)
    monkeypatch.setattr(ingest, "KEPT_DECODED", budget)
    header, frames = make_codec("int8", "huffman").encode(delta)
    payload = b"".join(frames)
    receiver = PushReceiver(client_id="c.a", expected_numel=NUMEL, max_upload_bytes=1 << 30, max_init_numel=NUMEL)
    receiver.on_header(PushHeader(base_version=1, upload_id="u2", codec_header=header, payload_bytes=len(payload)))
    receiver.on_payload(0, payload[: len(payload) // 2])

    receiver.abort()

    assert budget.free == 1 << 30
