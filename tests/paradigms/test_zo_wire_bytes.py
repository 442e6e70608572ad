"""A zeroth-order round on the wire, counted at the socket: O(seeds) bytes, not O(tensors).

The client talks to a real PS process through a TCP relay that counts every byte both ways (gRPC's HTTP/2
frames included). After its first whole model it pushes one round's scalars and fetches the next version,
which the PS sends as the round's scalars; the manifest (one entry per tensor) went with its Join and its
first model, and is not sent again.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from client_agent.connection.ps_client import JoinSpec, PSClient
from client_agent.paradigms import client_paradigm
from geofed.config import FederationConfig
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.recorder import RecordingProxy
from geofed_testing.wire import join, mint, push

SEEDS = 16
ZO = {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32}, "paradigm": {"name": "zo", "seeds": SEEDS}}
# A manifest the size of a small transformer's: 48 tensors with realistic names (~1.7 kB as protobuf).
MANIFEST = [(f"transformer.h.{i // 8}.mlp.c_fc.layer_{i % 8}.weight", (4, 8), "float32") for i in range(48)]
NUMEL = 48 * 32


@pytest.fixture
def reaper():
    with Reaper() as r:
        yield r


def _wait_for(client: PSClient, version: int) -> None:
    got = client.wait_for_version(version - 1, timeout=30)
    assert got is not None and got.version == version


@pytest.mark.parametrize("params", ["all", "lora"])
def test_a_zo_round_is_under_a_kilobyte_per_client_at_the_socket(params, tmp_path, reaper):
    settings = {**ZO, "paradigm": {**ZO["paradigm"], "params": params}}  # lora: MeZO on the adapters
    ps = PSNode(tmp_path / "ps", settings).start()
    reaper.proc(ps.proc)
    master = join(ps, "site.master", master=True, reaper=reaper, start=False)
    push(master, 0, np.random.default_rng(0).standard_normal(NUMEL).astype(np.float32), init=True, manifest=MANIFEST)

    proxy = RecordingProxy(int(ps.address.rsplit(":", 1)[1]))
    reaper.add(proxy.close)
    token = mint(ps, "site.b")
    fed = FederationConfig.model_validate(settings)
    decoders = client_paradigm(fed.paradigm).downlink_decoders()
    client = PSClient(f"127.0.0.1:{proxy.port}", "site.b", lambda: token, insecure=True, state_dir=tmp_path / "b")
    reaper.add(client.close)
    client.join(JoinSpec(decoders=lambda _fed: decoders))
    client.start()
    _wait_for(client, 1)  # the whole vector, once
    rng = np.random.default_rng(1)

    per_round = []
    for version in (1, 2, 3):
        time.sleep(0.3)  # let the previous transfer's trailing frames (stream end, window updates) pass
        before = proxy.bytes_both_ways()
        receipt = push(client, version, rng.standard_normal(SEEDS).astype(np.float32))
        assert receipt.status == "APPLIED"
        _wait_for(client, version + 1)
        per_round.append(proxy.bytes_both_ways() - before)

    assert client.latest().version == 4 and client.latest().manifest == tuple(client.manifest)
    assert max(per_round) <= 1024, per_round
