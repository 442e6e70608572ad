"""The overlapped sync path in process: training goes on while a push is in flight, the newer global model is
folded in exactly (eager application plus its correction), nothing trained is lost or counted twice with
any codec and error feedback, and a preemption mid-overlap resends the checkpointed upload and retrains
only what came after it."""

from __future__ import annotations

import hashlib
import io
import threading
import uuid

import numpy as np
import pytest
import torch
from torch import nn

from client_agent.connection.link_tuner import LinkMeter, LinkTuner
from client_agent.connection.ps_client import GlobalVersion, PushReceipt, StaleDeltaError, Upload
from client_agent.paradigms import client_paradigm
from client_agent.sync import OverlapSync, RoundResult, SyncContext, WholeVectorSync, overlap_kept_off, sync_route
from client_agent.training.checkpoint import CheckpointManager
from client_agent.training.ranks import Ranks
from client_agent.training.trainer import TrainStats
from geofed.codec import decoder_for
from geofed.config import AggregationConfig, FederationConfig
from geofed.protocol import geofed_pb2 as pb

N = 4096
STEP_SCALE = 1e-2


def step_vector(i: int) -> np.ndarray:
    """What inner step i adds to the parameters (a function of the batch index only, as replayed data is)."""
    return (np.random.default_rng(1000 + i).standard_normal(N) * STEP_SCALE).astype(np.float32)


def trained(steps) -> np.ndarray:
    """The reference: the sum of the given steps' updates, computed without the sync path."""
    return np.sum([step_vector(i) for i in steps], axis=0, dtype=np.float64).astype(np.float32)


class Vec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(N))


class FakeTrainer:
    """Each step adds `step_vector(data_position)` to the parameters and moves the data position on.

    A real `LocalTrainer` runs AdamW on token batches (its updates depend on the model it steps from); this
    one's updates depend only on the batch, so every update can be accounted for exactly. Its state is
    what a real trainer's `state_dict` holds (optimizer, step, data position), copied like a saved one."""

    def __init__(self) -> None:
        self.model, self.step, self.position = Vec(), 0, 0

    def train(self, steps: int) -> TrainStats:
        with torch.no_grad():
            for _ in range(steps):
                self.model.w += torch.from_numpy(step_vector(self.position))
                self.position += 1
                self.step += 1
        return TrainStats(steps, 64 * steps, 2 * steps, 3.0, 100.0, 0.1, "steps", 1e-3, 0.5)

    def flat(self) -> np.ndarray:
        return self.model.w.detach().numpy().copy()

    def state_dict(self) -> dict:
        return {"optimizer": {}, "step": self.step, "data_position": {"position": self.position}, "scaler": {}}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.position = int(state["step"]), int(state["data_position"]["position"])


class FakePS:
    """An async PS that applies every delta at weight `lr` to its global vector at once and publishes the
    next version; `hold` keeps each send in flight until released; upload ids it has seen come back
    DUPLICATE and are not applied again; `stale` refuses the next push.

    A real PS weighs by staleness, may buffer (ACCEPTED) or refuse, and streams the model over gRPC."""

    aggregation_mode = "async"
    closed = False
    shard_cuts = ()
    bytes_sent = 0

    def __init__(self, lr: float = 1.0, hold: bool = False) -> None:
        self.lr, self.report, self.stale = lr, {}, False
        self.global_ = np.zeros(N, np.float32)
        self.versions = [GlobalVersion(1, self.global_.copy(), ())]
        self.seen: set[str] = set()
        self.cond = threading.Condition()
        self.released = threading.Event()
        self.in_flight = threading.Event()
        if not hold:
            self.released.set()

    def prepare(self, *, base_version, codec_header, frames, **_) -> Upload:
        payload = b"".join(frames)
        header = pb.DeltaHeader(
            base_version=base_version,
            upload_id=uuid.uuid4().hex,
            codec_header=codec_header,
            payload_bytes=len(payload),
        )
        return Upload(header, io.BytesIO(payload), hashlib.sha256(payload).digest())

    def send(self, upload: Upload) -> PushReceipt:
        self.in_flight.set()
        assert self.released.wait(10), "the test never released the push"
        with self.cond:
            if self.stale:
                self.stale = False
                raise StaleDeltaError("too stale: resync")
            header, payload = upload.saved()
            if upload.upload_id in self.seen:
                return PushReceipt("DUPLICATE", self.versions[-1].version, 0, 1.0, len(payload), 0.0, 1)
            self.seen.add(upload.upload_id)
            dec = decoder_for(pb.DeltaHeader.FromString(header).codec_header, max_numel=N)
            delta = np.concatenate([v for _, v in dec.feed(payload)])
            dec.finish()
            self.global_ = self.global_ + self.lr * delta
            self.versions.append(GlobalVersion(self.versions[-1].version + 1, self.global_.copy(), ()))
            self.cond.notify_all()
            return PushReceipt("APPLIED", self.versions[-1].version, 0, 1.0, len(payload), 0.0, 1)

    def latest(self) -> GlobalVersion:
        return self.versions[-1]

    def wait_for_version(self, newer_than: int, timeout: float | None = None) -> GlobalVersion | None:
        with self.cond:
            self.cond.wait_for(lambda: self.versions[-1].version > newer_than, timeout)
            return self.versions[-1] if self.versions[-1].version > newer_than else None

    def wait_for_fresh(self, than: GlobalVersion | None, timeout: float | None = None) -> GlobalVersion | None:
        return self.versions[-1]


def make_sync(tmp_path, ps: FakePS, codec: str = "fp32", error_feedback: bool = False, eager: str = "outer"):
    settings = {
        "codec": {"name": codec, "error_feedback": error_feedback},
        "training": {"overlap_sync": True, "overlap_eager": eager},
        "aggregation": {"global_lr": 0.5},
    }
    if codec == "sparse":
        settings["codec"]["sparse_density"] = 0.05
    fed = FederationConfig.model_validate(settings)
    ctx = SyncContext(
        ps,
        Ranks(),
        fed,
        client_paradigm(fed.paradigm),
        LinkTuner(fed, LinkMeter(), N, "t.ovl"),
        "t.ovl",
        tmp_path,
        (),
        N,
    )
    return OverlapSync(ctx)


def one_round(sync: OverlapSync, trainer: FakeTrainer, base: GlobalVersion, steps: int) -> GlobalVersion:
    """The round loop's order on the overlapped path: adopt, train, settle the push in flight and fold its
    model in, push this round; the model the next round is based on."""
    sync.adopt(trainer.model, base)
    stats = trainer.train(steps)
    settled = sync.settle()
    if settled is not None:
        sync.adopt(trainer.model, settled.model)
        base = settled.model
    sync.push_round(trainer, RoundResult(base, stats, None))
    return base


def test_training_goes_on_while_the_push_is_in_flight(tmp_path):
    ps = FakePS(hold=True)
    sync, trainer = make_sync(tmp_path, ps), FakeTrainer()

    base = one_round(sync, trainer, ps.latest(), 3)
    assert ps.in_flight.wait(5)
    trainer.train(2)  # the next round's steps, with the push still unanswered
    assert ps.latest().version == 1 and trainer.step == 5
    threading.Timer(0.2, ps.released.set).start()
    settled = sync.settle()

    assert settled.outcome.status == "APPLIED" and settled.model.version == 2
    assert settled.waited_s > 0.1  # the round loop waited for the held push: that is the idle time
    assert base.version == 1


class CountingPS(FakePS):
    """FakePS that counts the waits for a model."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.waits = 0

    def wait_for_version(self, newer_than: int, timeout: float | None = None) -> GlobalVersion | None:
        self.waits += 1
        return super().wait_for_version(newer_than, timeout)


def test_the_last_push_waits_for_no_model_and_leaves_no_thread_behind(tmp_path):
    """The run's last push: its outcome is recorded, no model is awaited, and once closed no thread of the
    sync path is left talking to the PS while the process exits."""
    ps = CountingPS(hold=True)
    sync, trainer = make_sync(tmp_path, ps), FakeTrainer()
    one_round(sync, trainer, ps.latest(), 3)
    assert ps.in_flight.wait(5)
    threading.Timer(0.2, ps.released.set).start()

    settled = sync.settle(await_model=False)
    sync.close()

    assert settled.outcome.status == "APPLIED" and settled.model is None
    assert ps.waits == 0
    assert not [t for t in threading.enumerate() if t.name == "geofed-overlap" and t.is_alive()]


@pytest.mark.parametrize(("eager", "weight"), [("outer", 0.5), ("full", 1.0)])
def test_the_next_round_starts_from_the_eager_estimate(tmp_path, eager, weight):
    """While the push is in flight the model is base + w·δ: the outer learning rate's share of the delta
    (outer), or all of it (full); the checkpoint keeps the model as trained."""
    ps = FakePS(hold=True)
    sync, trainer = make_sync(tmp_path, ps, eager=eager), FakeTrainer()

    one_round(sync, trainer, ps.latest(), 3)

    np.testing.assert_allclose(trainer.flat(), weight * trained(range(3)), atol=1e-6)
    saved = CheckpointManager(tmp_path / "checkpoints").load_latest()
    np.testing.assert_allclose(saved.model.numpy(), trained(range(3)), atol=1e-6)
    ps.released.set()
    sync.settle()


def test_the_newer_model_is_folded_in_keeping_the_progress_since_the_push(tmp_path):
    """θ ← G' + (θ − θ_k), with G' the PS's model after the push (here at outer weight 0.5), and the next
    delta is exactly the progress since the push."""
    ps = FakePS(lr=0.5)
    sync, trainer = make_sync(tmp_path, ps), FakeTrainer()
    base = one_round(sync, trainer, ps.latest(), 3)
    at_push = trainer.flat()
    trainer.train(2)
    after = trainer.flat()

    settled = sync.settle()
    sync.adopt(trainer.model, settled.model)

    expected_global = 0.5 * trained(range(3))
    np.testing.assert_allclose(settled.model.flat, expected_global, atol=1e-6)
    np.testing.assert_allclose(trainer.flat(), expected_global + (after - at_push), atol=1e-6)
    sync.push_round(trainer, RoundResult(settled.model, trainer.train(0), None))
    sync.settle()
    np.testing.assert_allclose(ps.global_, expected_global + 0.5 * trained(range(3, 5)), atol=1e-6)
    assert base.version == 1


@pytest.mark.parametrize(
    ("codec", "error_feedback"),
    [("fp32", False), ("bf16", True), ("int8", True), ("int16", False), ("sparse", True)],
)
def test_every_step_reaches_the_global_model_once_with_any_codec(tmp_path, codec, error_feedback):
    """One client at outer weight 1: after the last push settles, the PS's model plus what the client still
    owes (the error-feedback residual) is the sum of every step trained, each once."""
    ps = FakePS()
    sync, trainer = make_sync(tmp_path, ps, codec, error_feedback), FakeTrainer()
    base = ps.latest()
    for steps in (3, 1, 4, 2, 5):
        base = one_round(sync, trainer, base, steps)
    final = sync.settle()

    assert final.outcome.status == "APPLIED" and len(ps.versions) == 6
    owed = sync.ef.residual if sync.ef is not None else 0.0
    tol = 1e-5 if codec == "fp32" else 1e-4
    np.testing.assert_allclose(ps.global_ + owed, trained(range(trainer.step)), atol=tol)
    if codec == "fp32":
        np.testing.assert_allclose(ps.global_, trained(range(trainer.step)), atol=1e-5)


def test_a_stale_push_is_dropped_and_its_error_feedback_discarded(tmp_path):
    ps = FakePS()
    sync, trainer = make_sync(tmp_path, ps, "int8", error_feedback=True), FakeTrainer()
    base = one_round(sync, trainer, ps.latest(), 3)  # round 1 (steps 0-2) in flight
    sync.adopt(trainer.model, base)
    stats = trainer.train(2)  # steps 3-4
    settled = sync.settle()
    sync.adopt(trainer.model, settled.model)
    residual_before = sync.ef.residual.copy()
    ps.stale = True
    sync.push_round(trainer, RoundResult(settled.model, stats, None))  # round 2: the PS refuses it
    trainer.train(4)  # steps 5-8, during the overlap
    settled = sync.settle()
    sync.adopt(trainer.model, settled.model)

    assert settled.outcome.status == "STALE"
    np.testing.assert_array_equal(sync.ef.residual, residual_before)  # its quantisation error does not carry
    # The fold drops round 2's delta (the PS never took it) and keeps the 4 steps trained since.
    np.testing.assert_allclose(trainer.flat(), ps.global_ + trained(range(5, 9)), atol=1e-5)


def test_a_preemption_mid_push_resends_the_upload_and_retrains_only_what_followed(tmp_path):
    """Killed while push 2 is in flight, with steps trained after it: the relaunch restores the step and
    data position at push 2 and resends its upload once; the steps after it are trained again from the
    data position, so every step reaches the global model exactly once."""
    ps = FakePS()
    sync, trainer = make_sync(tmp_path, ps), FakeTrainer()
    base = one_round(sync, trainer, ps.latest(), 3)
    ps.released.clear()
    base = one_round(sync, trainer, base, 2)  # push 2 (steps 3-4) now in flight
    assert ps.in_flight.wait(5)
    trainer.train(4)  # steps 5-8 trained during the overlap, then SIGKILL: `sync` and `trainer` are gone

    resumed = CheckpointManager(tmp_path / "checkpoints").load_latest()
    ps.released.set()  # the killed client's send lands at the PS after all (resent: DUPLICATE)
    relaunched, trainer2 = make_sync(tmp_path, ps), FakeTrainer()
    relaunched.restore(trainer2, resumed, sharded=False)
    assert (trainer2.step, trainer2.position) == (5, 5)
    relaunched.resend()
    np.testing.assert_allclose(ps.global_, trained(range(5)), atol=1e-5)  # push 2 applied once

    base = one_round(relaunched, trainer2, ps.latest(), 4)  # steps 5-8 again, from the data position
    relaunched.settle()
    np.testing.assert_allclose(ps.global_, trained(range(9)), atol=1e-5)
    assert base.version >= 1


def test_route_takes_the_overlapped_path_only_where_it_fits():
    fed = FederationConfig.model_validate({})
    pretrain = client_paradigm(fed.paradigm)
    lora = client_paradigm(FederationConfig.model_validate({"paradigm": {"name": "lora"}}).paradigm)

    assert sync_route(1, pretrain, ["int8"], overlap=True).path is OverlapSync
    assert sync_route(1, pretrain, ["int8"]).path is WholeVectorSync
    several = sync_route(2, pretrain, ["int8"], overlap=True)
    assert several.path is not OverlapSync and "overlap_sync not taken" in several.reason
    small = sync_route(1, lora, ["int8"], overlap=True)
    assert small.path is WholeVectorSync and "overlap_sync not taken" in small.reason and "'lora'" in small.reason
    # Under an outer step with momentum a round trained one transfer behind adds to the momentum, and auto mode
    # times rounds as a round-by-round client runs them: every site syncs round by round.
    for agg, why in (({"outer_optimizer": "nesterov"}, "the outer step carries momentum"),
                     ({"outer_optimizer": "adam"}, "the outer step carries momentum"),
                     ({"mode": "auto"}, "aggregation.mode auto times")):
        kept_off = overlap_kept_off(AggregationConfig(**agg))
        route = sync_route(1, pretrain, ["int8"], overlap=True, kept_off=kept_off)
        assert route.path is WholeVectorSync and f"overlap_sync not taken: {why}" in route.reason
    assert overlap_kept_off(AggregationConfig()) is None  # the defaults: FedAvg's outer step, async
