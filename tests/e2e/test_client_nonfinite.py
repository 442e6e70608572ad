"""A round whose every step has a non-finite loss is dropped: the client resets to the global model, pushes
nothing for it, and goes on with the next round (issue 17)."""

from __future__ import annotations

import itertools
import json
import logging
import math

import pytest

import client_agent.training.trainer as trainer_module
from client_agent.agent import ClientAgent
from client_agent.connection.ps_client import PSClient
from client_agent.data.corpus import stdlib_split, write_file_list
from geofed.config import ClientConfig
from geofed_apps.launch import write_token
from geofed_testing.procs import PSNode

FED = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
    "training": {"batch_size": 4, "micro_batch_size": 4, "local_steps": 2, "sync_interval_s": 60,
                 "eval_every": 100, "precision": "fp32"},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "int8"},
}
# One forward/backward per step: the first round's 2 steps, then the first step of the next round.
POISONED_PASSES = 3


@pytest.fixture
def ps(tmp_path):
    node = PSNode(tmp_path / "ps", FED).start()
    yield node
    node.kill()


def test_a_wholly_non_finite_round_is_not_pushed_and_the_client_recovers(ps, tmp_path, monkeypatch, caplog):
    # Prepare: the first round's losses are NaN (say, an fp16 overflow every step), and so is the next
    # round's first; later ones are real.
    calls, real_loss = itertools.count(), trainer_module.lm_loss

    def loss(model, chunk):
        out = real_loss(model, chunk)
        return out * math.nan if next(calls) < POISONED_PASSES else out

    monkeypatch.setattr(trainer_module, "lm_loss", loss)
    pushes = []
    real_send = PSClient.send

    def send(self, upload):
        pushes.append(upload.header.init)
        return real_send(self, upload)

    monkeypatch.setattr(PSClient, "send", send)
    with ps.admin() as admin:
        token = admin.create_token("t.nan", master=True)[0]
    data = write_file_list(tmp_path / "data.list", stdlib_split(2).clients[0][:10])
    cfg = ClientConfig(ps=ps.address, client_id="t.nan", token_file=str(write_token(tmp_path / "token", token)),
                       data=str(data), work_dir=str(tmp_path / "work"), insecure=True, device="cpu", max_rounds=2)

    # Execute
    with caplog.at_level(logging.INFO, logger="geofed.client"):
        rc = ClientAgent(cfg).run()

    # Assert: Θ0 and two deltas pushed, none for the NaN round; two recorded syncs with finite losses.
    assert rc == 0
    assert pushes == [True, False, False]
    records = [json.loads(line) for line in (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["APPLIED", "APPLIED"]
    assert all(math.isfinite(r["train_loss"]) for r in records)
    assert [r["step"] for r in records] == [4, 6]  # steps 1-2 were trained (and skipped), then 3-4 and 5-6
    assert [r["skipped_steps"] for r in records] == [1, 0]  # step 3 skipped, the round still pushed
    assert ps.status()["version"] == 3
    assert "event=non_finite_round" in caplog.text
