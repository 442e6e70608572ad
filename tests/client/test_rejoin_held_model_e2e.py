"""A relaunched client offers the PS the exact model its checkpoint kept (issue 14, rejoin time).

Real PS process and sockets. The reference for every model is the PS's own published vector, read through
a separate observer session, and the bytes each client received are counted by the client itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from client_agent.connection.ps_client import GlobalVersion
from client_agent.training.checkpoint import ClientCheckpoint, load_checkpoint, save_checkpoint
from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, Observer, init_model, join, push

FP32_BYTES = NUMEL * 4


@pytest.fixture(scope="module")
def ps(tmp_path_factory):
    node = PSNode(tmp_path_factory.mktemp("ps"), {
        "aggregation": {"mode": "async", "buffer_size": 1, "global_lr": 1.0, "weighting": "uniform",
                        "max_staleness": 8},
        "downlink": {"encoding": "grid_delta", "history": 8},
    }).start()
    master = join(node, "r.master", master=True)
    init_model(master)
    held = master.wait_for_version(0, timeout=20)  # version 1, as a client that adopted it holds it
    node.held = GlobalVersion(held.version, held.flat.copy(), held.manifest, instance=held.instance)
    node.master = master
    yield node
    master.close()
    node.kill()


def _delta(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_t(3.0, NUMEL) * 1e-3).astype(np.float32)


def _relaunched(ps, client_id: str, kept: GlobalVersion) -> tuple[object, str]:
    """A fresh PSClient that joins, is offered `kept` before its stream starts, then starts it."""
    client = join(ps, client_id, start=False)
    use = client.hold(kept)
    client.start()
    return client, use


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_a_kept_model_at_the_ps_version_of_the_same_instance_is_adopted_without_a_transfer(ps):
    # Prepare: the PS is still at the version kept (nothing pushed yet in this module)
    version, published = Observer(ps, "obs.1").model()
    assert version == ps.held.version

    # Execute
    client, use = _relaunched(ps, "r.same", ps.held)
    got = client.wait_for_version(0, timeout=20)

    # Assert
    assert use == "adopted"
    assert got.version == version and _same_bits(got.flat, published)
    assert client.bytes_received == 0
    client.close()


def test_the_same_version_from_another_ps_instance_is_not_trusted(ps):
    other = dataclasses.replace(ps.held, instance="an-earlier-instance")

    client, use = _relaunched(ps, "r.other", other)
    got = client.wait_for_version(0, timeout=20)

    assert use == "dropped"
    assert _same_bits(got.flat, Observer(ps, "obs.2").model()[1])
    assert client.bytes_received > 0  # fetched, not taken on trust
    client.close()


def test_a_kept_model_behind_the_ps_brings_only_the_difference(ps):
    # Prepare: the federation moves on two versions past the kept one
    base = Observer(ps, "obs.3a").model()[0]
    for k in range(2):
        assert push(ps.master, base + k, _delta(100 + k)).status == "APPLIED"
        ps.master.wait_for_version(base + k, timeout=20)
    version, published = Observer(ps, "obs.3").model()
    fresh = join(ps, "r.fresh")  # the same relaunch without a kept model: the whole vector
    whole = fresh.wait_for_version(0, timeout=20)

    # Execute
    client, use = _relaunched(ps, "r.behind", ps.held)
    got = client.wait_for_version(version - 1, timeout=20)

    # Assert
    assert use == "difference"
    assert got.version == version and _same_bits(got.flat, published) and _same_bits(whole.flat, published)
    assert client.bytes_received < 0.6 * fresh.bytes_received
    for c in (client, fresh):
        c.close()


def test_a_kept_model_whose_bytes_differ_from_the_ps_version_is_dropped_for_the_whole_model(ps):
    # Prepare: the kept vector claims version 1 but one value is off (a damaged or foreign checkpoint)
    damaged = ps.held.flat.copy()
    damaged[7] += 1.0
    wrong = dataclasses.replace(ps.held, flat=damaged)
    version, published = Observer(ps, "obs.4").model()

    # Execute
    client, use = _relaunched(ps, "r.damaged", wrong)
    got = client.wait_for_version(version - 1, timeout=30)

    # Assert: the difference decoded on the wrong base fails the PS's sha256; the whole model follows
    assert use == "difference"
    assert got.version == version and _same_bits(got.flat, published)
    client.close()


def test_a_kept_model_ahead_of_the_ps_is_dropped(ps):
    ahead = dataclasses.replace(ps.held, version=10_000)

    client, use = _relaunched(ps, "r.ahead", ahead)
    got = client.wait_for_version(0, timeout=20)

    assert use == "dropped"
    assert got.version < 10_000 and _same_bits(got.flat, Observer(ps, "obs.5").model()[1])
    client.close()


def test_the_client_checkpoint_keeps_the_exact_base_and_its_instance(tmp_path):
    base = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    ckpt = ClientCheckpoint(model=torch.zeros(1000), optimizer={}, step=5, data_position={"epoch": 0, "index": 1},
                            base_version=4, base_model=torch.from_numpy(base), base_instance="ps-abc")

    back = load_checkpoint(save_checkpoint(tmp_path / "latest.pt", ckpt))

    assert back.base_version == 4 and back.base_instance == "ps-abc"
    assert _same_bits(back.base_model.numpy(), base)


def test_a_checkpoint_written_before_the_base_was_kept_still_loads(tmp_path):
    ckpt = ClientCheckpoint(model=torch.zeros(10), optimizer={}, step=1, data_position={}, base_version=2)
    data = ckpt.to_dict()
    del data["base_model"], data["base_instance"]  # the fields an older client did not write
    torch.save(data, tmp_path / "old.pt")

    back = load_checkpoint(tmp_path / "old.pt")

    assert back.base_model is None and back.base_instance == ""
