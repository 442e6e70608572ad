"""The PS's model stream in process: differences against held versions, full vectors when they are gone."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.codec import model_delta
from ps_server.aggregation.downlink import GRID_DELTA, Downlink, GridStream
from ps_server.global_model import GlobalModel

MANIFEST = (("w", (50_000,), "float32"),)


def _versions(model: GlobalModel, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    flat = rng.normal(0, 0.02, 50_000).astype(np.float32)
    snaps = []
    for v in range(1, n + 1):
        snaps.append(model.publish(v, flat.copy(), MANIFEST))
        flat = (flat + rng.standard_t(3.0, flat.size) * 1e-4).astype(np.float32)
    return snaps


def test_a_client_holding_a_kept_version_gets_a_small_exact_difference():
    # Prepare
    stream, snaps = GridStream(steps=8.0, history=4), _versions(GlobalModel(), 4)
    held = stream.downlink(snaps[0], 0)
    for s in snaps[1:3]:
        stream.downlink(s, 0)

    # Execute
    down = stream.downlink(snaps[3], 1)

    # Assert
    assert held.base_version == 0 and held.version == 1
    assert down.encoding == GRID_DELTA and down.base_version == 1
    assert down.nbytes < snaps[3].flat.nbytes / 3
    held_flat = stream.published(snaps[0]).flat
    got = model_delta.decode(held_flat, down.data)
    full = stream.published(snaps[3]).flat
    assert np.array_equal(got.view(np.uint32), full.view(np.uint32))


def test_a_client_whose_version_left_the_history_gets_the_whole_vector():
    stream, snaps = GridStream(steps=8.0, history=2), _versions(GlobalModel(), 4)
    for s in snaps:
        stream.downlink(s, 0)

    down = stream.downlink(snaps[3], 1)  # version 1 is gone (history 2 keeps 3 and 4)

    assert down.base_version == 0  # the whole vector: fp32, or its difference from zeros when smaller
    assert down.nbytes <= snaps[3].flat.nbytes


def test_a_whole_vector_coded_from_zeros_is_exact_and_smaller_than_fp32():
    stream, snaps = GridStream(steps=8.0, history=4), _versions(GlobalModel(), 3)
    for s in snaps:
        stream.downlink(s, 0)

    down = stream.downlink(snaps[2], 0)

    assert down.encoding == GRID_DELTA and down.base_version == 0
    assert down.nbytes < 0.75 * snaps[2].flat.nbytes
    got = model_delta.decode(np.zeros(snaps[2].flat.size, np.float32), down.data)
    full = np.frombuffer(Downlink.full(3, stream.published(snaps[2]).flat, b"", MANIFEST).data, np.float32)
    assert np.array_equal(got.view(np.uint32), full.view(np.uint32))


def test_a_version_unknown_to_the_ps_gets_the_whole_vector_never_an_error():
    stream, snaps = GridStream(steps=8.0, history=4), _versions(GlobalModel(), 2)

    down = stream.downlink(snaps[1], 99)  # e.g. a client of a PS that restarted from an older checkpoint

    assert down.base_version == 0


def test_the_published_vector_is_the_true_model_on_its_grid_within_a_fraction_of_an_update():
    stream, snaps = GridStream(steps=8.0, history=4), _versions(GlobalModel(), 5)
    for s in snaps:
        pub = stream.published(s).flat
        assert np.abs(pub.astype(np.float64) - s.flat).max() < 0.5e-4


def test_the_same_request_is_served_from_the_cache_with_the_same_bytes():
    stream, snaps = GridStream(steps=8.0, history=4), _versions(GlobalModel(), 3)
    for s in snaps:
        stream.downlink(s, 0)

    first, again = stream.downlink(snaps[2], 2), stream.downlink(snaps[2], 2)

    assert bytes(first.data) == bytes(again.data) and first.sha256 == again.sha256


def test_a_large_whole_vector_goes_as_fp32_without_coding_it(monkeypatch):
    """Beyond ZEROS_MAX_NUMEL a joining client gets fp32 at once instead of waiting for the PS to code it."""
    import ps_server.aggregation.downlink as downlink

    monkeypatch.setattr(downlink, "ZEROS_MAX_NUMEL", 1000)
    monkeypatch.setattr(model_delta, "encode", lambda *a, **k: pytest.fail("a large whole vector was coded"))
    stream, snaps = GridStream(steps=8.0, history=4), _versions(GlobalModel(), 1)

    down = stream.downlink(snaps[0], 0)

    assert down.encoding == "fp32" and down.base_version == 0 and down.nbytes == snaps[0].flat.nbytes
