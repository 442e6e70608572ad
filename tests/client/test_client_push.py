"""The whole-vector push: the round is checkpointed (upload included) before anything is sent, and the
error-feedback residual moves on by the PS's answer: what quantisation lost when it takes the delta,
nothing when it refuses it (stale, or put off by the site's round share)."""

from __future__ import annotations

import hashlib
import io
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest
import torch

from client_agent.connection.link_tuner import LinkMeter, LinkTuner
from client_agent.connection.ps_client import GlobalVersion, PushReceipt, StaleDeltaError, Upload
from client_agent.errors import DeferredDeltaError
from client_agent.paradigms import client_paradigm
from client_agent.sync import RoundResult, SyncContext, WholeVectorSync
from client_agent.training.trainer import TrainStats
from geofed.codec import decoder_for
from geofed.config import FederationConfig
from geofed.protocol import geofed_pb2 as pb

N = 5000


class Sent(NamedTuple):
    """What one send carried: the upload id, its serialised header and its payload."""

    upload_id: str
    header: bytes
    payload: bytes


class FakePS:
    """Answers each send as `answers` says ("take", "stale" or "defer"); records the order of saves and sends.

    Like `PSClient.send` it reads the upload's spool, closes it once answered and raises the client's errors;
    the real one streams the payload over gRPC, retries transient codes for up to its retry budget, maps
    ABORTED to DeferredDeltaError, and keeps a buffered (ACCEPTED) upload for a PS restart."""

    bytes_sent = 0
    shard_cuts = ()  # a single PS: frames need not end at shard bounds (PSClient learns them at Join)

    def __init__(self, events: list[str], answers: list[str]) -> None:
        self.events, self.answers, self.report = events, answers, {}
        self.sent: list[Sent] = []
        self.version = 2  # the version the round was trained from

    def prepare(self, *, base_version, codec_header, frames, **_) -> Upload:
        payload = b"".join(frames)
        header = pb.DeltaHeader(base_version=base_version, upload_id="u-7", codec_header=codec_header,
                                payload_bytes=len(payload))
        return Upload(header, io.BytesIO(payload), hashlib.sha256(payload).digest())

    def send(self, upload: Upload) -> PushReceipt:
        self.events.append("send")
        self.sent.append(Sent(upload.upload_id, *upload.saved()))  # reads the spool: a closed one raises here
        answer = self.answers[min(len(self.sent), len(self.answers)) - 1]
        upload.spool.close()  # like PSClient.send: closed once the PS has answered
        if answer == "defer":
            raise DeferredDeltaError("round share: push again once the other sites have")
        if answer == "stale":
            raise StaleDeltaError("too stale: resync")
        return PushReceipt("APPLIED", 3, 0, 1.0, upload.header.payload_bytes, 0.1, 1)

    def latest(self):
        return GlobalVersion(self.version, np.zeros(1, np.float32), ()) if self.version else None


def decoded(sent: Sent) -> np.ndarray:
    dec = decoder_for(pb.DeltaHeader.FromString(sent.header).codec_header, max_numel=N)
    out = np.concatenate([v for _, v in dec.feed(sent.payload)])
    dec.finish()
    return out


def push(tmp_path, refuse: bool, codec: str = "int8", answers: list[str] | None = None):
    """One whole-vector push of a fresh delta with error feedback that already holds a residual; the fake PS
    answers each send as `answers` says (default: take it, or refuse it as stale)."""
    fed = FederationConfig.model_validate({"codec": {"name": codec}})
    rng = np.random.default_rng(0)
    events: list[str] = []
    ps = FakePS(events, answers or ["stale" if refuse else "take"])
    ranks = SimpleNamespace(leader=True, rank=0, world=1)
    ctx = SyncContext(ps, ranks, fed, client_paradigm(fed.paradigm), LinkTuner(fed, LinkMeter(), N, "t.push"),
                      "t.push", tmp_path, (), N)
    sync = WholeVectorSync(ctx)
    sync.ef.residual[:] = rng.standard_normal(N).astype(np.float32) * 1e-3
    before = sync.ef.residual.copy()
    delta = rng.standard_normal(N).astype(np.float32)
    sync.delta.copy_(torch.from_numpy(delta))
    sync._checkpoint = lambda state, flat, result, step, upload: events.append(f"save {upload.upload_id}")
    stats = TrainStats(3, 96, 12, 2.0, 10.0, 1.0, "steps", 1e-3, 0.5)
    outcome = sync.push(RoundResult(GlobalVersion(2, np.zeros(N, np.float32), ()), stats, None), {}, 3)
    return outcome, sync.ef, before, delta, events, ps


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


@pytest.mark.parametrize("answer", ["stale", "defer"])
def test_a_refused_or_deferred_push_is_sent_once_and_leaves_the_residual(tmp_path, answer):
    outcome, ef, before, _, events, _ = push(tmp_path, False, answers=[answer])
    assert outcome.status == {"stale": "STALE", "defer": "DEFERRED"}[answer]
    assert events == ["save u-7", "send"]  # the caller retrains on a newer model: no wait, no resend here
    assert np.array_equal(ef.residual, before)


def test_the_push_reports_the_paradigm_s_held_out_metrics_of_its_round(tmp_path):
    fed = FederationConfig.model_validate({})
    ps = FakePS([], ["take"])
    ctx = SyncContext(ps, SimpleNamespace(leader=True, rank=0, world=1), fed, client_paradigm(fed.paradigm),
                      LinkTuner(fed, LinkMeter(), N, "t.push"), "t.push", tmp_path, (), N)
    sync = WholeVectorSync(ctx)
    sync._checkpoint = lambda *args: None
    stats = TrainStats(3, 96, 12, 2.0, 10.0, 1.0, "steps", 1e-3, 0.5)
    result = RoundResult(GlobalVersion(2, np.zeros(N, np.float32), ()), stats, 2.25,
                         eval_metrics={"preference_accuracy": 62.5, "reward_margin": 0.5})

    sync.push(result, {}, 3)

    assert ps.report["eval_loss"] == 2.25
    assert ps.report["paradigm_metrics"] == {"preference_accuracy": 62.5, "reward_margin": 0.5}
