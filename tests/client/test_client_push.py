"""The whole-vector push: the round is checkpointed (upload included) before anything is sent, and the
error-feedback residual moves on by the PS's answer: what quantisation lost when it takes the delta,
nothing when it refuses it as stale, the whole delta when the site's round share puts it off."""

from __future__ import annotations

import hashlib
import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from client_agent.errors import DeferredDeltaError
from client_agent.link_tuner import LinkMeter, LinkTuner
from client_agent.paradigms import client_paradigm
from client_agent.ps_client import GlobalVersion, PushReceipt, StaleDeltaError, Upload
from client_agent.sync import RoundResult, SyncContext, WholeVectorSync
from client_agent.trainer import TrainStats
from geofed.codec import decoder_for
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb

N = 5000


class FakePS:
    """Answers each push as `answers` says ("take", "stale" or "defer"; the last one repeats); records the
    order of saves and sends."""

    bytes_sent = 0
    shard_cuts = ()  # a single PS: frames need not end at shard bounds (PSClient learns them at Join)

    def __init__(self, events: list[str], answers: list[str]) -> None:
        self.events, self.answers, self.report = events, answers, {}
        self.sent: list[Upload] = []

    def prepare(self, *, base_version, codec_header, frames, **_) -> Upload:
        payload = b"".join(frames)
        header = pb.DeltaHeader(base_version=base_version, upload_id="u-7", codec_header=codec_header,
                                payload_bytes=len(payload))
        return Upload(header, io.BytesIO(payload), hashlib.sha256(payload).digest())

    def send(self, upload: Upload) -> PushReceipt:
        self.events.append("send")
        self.sent.append(upload)
        answer = self.answers[min(len(self.sent), len(self.answers)) - 1]
        if answer == "stale":
            raise StaleDeltaError("too stale: resync")
        if answer == "defer":
            raise DeferredDeltaError("round share: push again once the other sites have")
        return PushReceipt("APPLIED", 3, 0, 1.0, upload.header.payload_bytes, 0.1, 1)

    def latest(self):
        return None


def decoded(upload: Upload) -> np.ndarray:
    header, payload = upload.saved()
    dec = decoder_for(pb.DeltaHeader.FromString(header).codec_header, max_numel=N)
    out = np.concatenate([v for _, v in dec.feed(payload)])
    dec.finish()
    return out


def push(tmp_path, refuse: bool, codec: str = "int8"):
    """One whole-vector push of a fresh delta with error feedback that already holds a residual."""
    return pushes(tmp_path, ["stale" if refuse else "take"], codec)[:6]


def pushes(tmp_path, answers: list[str], codec: str = "int8"):
    """One whole-vector push per answer, each of a fresh delta, with error feedback that starts with a residual."""
    fed = FederationConfig.model_validate({"codec": {"name": codec}})
    rng = np.random.default_rng(0)
    events: list[str] = []
    ps = FakePS(events, answers)
    ranks = SimpleNamespace(leader=True, rank=0, world=1)
    ctx = SyncContext(ps, ranks, fed, client_paradigm(fed.paradigm), LinkTuner(fed, LinkMeter(), N, "t.push"),
                      "t.push", tmp_path, (), N)
    sync = WholeVectorSync(ctx)
    sync.ef.residual[:] = rng.standard_normal(N).astype(np.float32) * 1e-3
    before = sync.ef.residual.copy()
    sync._checkpoint = lambda state, flat, result, step, upload: events.append(f"save {upload.upload_id}")
    stats = TrainStats(3, 96, 12, 2.0, 10.0, 1.0, "steps", 1e-3, 0.5)
    outcomes, deltas = [], []
    for _ in answers:
        deltas.append(rng.standard_normal(N).astype(np.float32))
        sync.delta.copy_(torch.from_numpy(deltas[-1]))
        outcomes.append(sync.push(RoundResult(GlobalVersion(2, np.zeros(N, np.float32), ()), stats, None), {}, 3))
    return outcomes[-1], sync.ef, before, deltas[-1], events, ps, outcomes, deltas


@pytest.mark.parametrize("refuse", [True, False])
def test_the_round_is_saved_with_its_upload_before_it_is_sent(tmp_path, refuse):
    _, _, _, _, events, _ = push(tmp_path, refuse)
    assert events == ["save u-7", "send"]


def test_a_refused_push_leaves_the_residual_as_it_was(tmp_path):
    outcome, ef, before, _, _, _ = push(tmp_path, refuse=True)
    assert outcome.status == "STALE"
    assert np.array_equal(ef.residual, before)


def test_a_taken_push_keeps_what_quantisation_lost(tmp_path):
    outcome, ef, before, delta, _, ps = push(tmp_path, refuse=False)
    assert outcome.status == "APPLIED"
    # Independent reference: what the PS decodes, subtracted from what was meant to be sent.
    np.testing.assert_allclose(ef.residual, (delta + before) - decoded(ps.sent[0]), atol=1e-6)


@pytest.mark.parametrize("codec", ["int8", "fp32", "sparse"])
def test_a_deferred_push_keeps_all_its_work_for_the_next_one(tmp_path, codec):
    *_, ef, before, _, _, ps, outcomes, deltas = pushes(tmp_path, ["defer", "defer", "take"], codec)
    assert [o.status for o in outcomes] == ["DEFERRED", "DEFERRED", "APPLIED"]
    # Independent reference: nothing is lost or counted twice. What the PS took (the last payload) plus
    # what is still held equals everything trained, the residual the client started with included.
    np.testing.assert_allclose(decoded(ps.sent[2]) + ef.residual, before + sum(deltas), atol=1e-5)
