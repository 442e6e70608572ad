"""The agent's round loop in process, against a fake sync path, a fake PS and a fake trainer: each round adopts
the model it trains from, pushes what it trained on that model, waits for the next one and records the round."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from client_agent.agent import ClientAgent
from client_agent.connection.link_tuner import LinkMeter, LinkTuner
from client_agent.connection.ps_client import GlobalVersion
from client_agent.paradigms import ClientParadigm, client_paradigm
from client_agent.progress import RoundProgress
from client_agent.site import Site
from client_agent.sync import OverlappedRounds, PushOutcome, RoundResult, Settled, SyncContext, SyncPath
from client_agent.training.ranks import Ranks
from client_agent.training.trainer import NonFiniteLossError, TrainStats
from geofed.config import ClientConfig, FederationConfig

NUMEL = 8


class FakePS:
    """A PS in sync mode whose round closes as soon as a delta is applied.

    Its waits answer as `PSClient`'s do: a version newer than asked for, or None after the timeout (here at
    once, where the real one blocks). It publishes version v + 1 when a push on v is applied; a real PS
    closes the round only at quorum or the straggler timeout, and streams the model over the network."""

    aggregation_mode = "sync"
    closed = False

    def __init__(self, events: list) -> None:
        self.events = events
        self.versions = [GlobalVersion(1, np.zeros(NUMEL, np.float32), ())]
        self.progress = RoundProgress()  # what its heartbeats would carry

    def publish(self, version: int) -> None:
        self.versions.append(GlobalVersion(version, np.full(NUMEL, version, np.float32), ()))

    def wait_for_version(self, newer_than: int, timeout: float | None = None) -> GlobalVersion | None:
        self.events.append(("wait", newer_than))
        newer = [v for v in self.versions if v.version > newer_than]
        return newer[-1] if newer else None

    def latest(self) -> GlobalVersion | None:
        return self.versions[-1]


class FakeSync(SyncPath):
    """Records what the loop hands it; every push is APPLIED and makes the PS publish the next version.

    The real paths diff, encode, checkpoint and send over the PS client; this one only checks that the
    round it is asked to push started from the model it last adopted. Waiting for the next model is the
    seam's own (`SyncPath.sync_round`), on the fake PS."""

    def __init__(self, ps: FakePS, events: list, fed: FederationConfig) -> None:
        self.ps, self.events, self.adopted = ps, events, None
        self.ctx = SyncContext(ps, Ranks(), fed, client_paradigm(fed.paradigm), None, "t.loop", None, None, NUMEL)

    def restore(self, trainer, resumed, sharded: bool) -> None:
        return None  # a fresh site: nothing to restore

    def bootstrap(self, model, resumed) -> None:
        raise AssertionError("the loop never bootstraps; the agent does before it")

    def resend(self) -> None:
        raise AssertionError("the loop never resends; the agent does before it")

    def adopt(self, model, global_model: GlobalVersion | None) -> None:
        self.adopted = global_model
        self.events.append(("adopt", global_model.version))

    def push_round(self, trainer, result: RoundResult) -> PushOutcome:
        assert result.base is self.adopted, "a round is pushed on the model it trained from"
        self.events.append(("push", result.base.version, result.stats.steps, result.eval_loss))
        self.ps.publish(result.base.version + 1)
        return PushOutcome("APPLIED", result.base.version + 1, 0, 100, 0.01, "int8")


class FakeTrainer:
    """Takes `steps` steps per call (no model, no data); raises NonFiniteLossError for the rounds listed in
    `non_finite` (as the real trainer does when no step of a round had a finite loss). The real one trains a
    model on token batches and may stop at the deadline before `steps`."""

    tokens_per_step = 32

    def __init__(self, events: list, non_finite: set[int] = frozenset()) -> None:
        self.events, self.non_finite, self.step, self.calls, self.model = events, set(non_finite), 0, 0, None
        self.heartbeat: Callable[[], dict] = dict  # what a heartbeat sent now would report
        self.heartbeats: list[dict] = []  # what one sent at the end of each call's steps reported

    def train(self, steps: int, deadline: float | None = None) -> TrainStats:
        self.calls += 1
        if self.calls in self.non_finite:
            self.events.append(("non_finite",))
            raise NonFiniteLossError("loss is nan at every step")
        self.step += steps
        self.heartbeats.append(self.heartbeat())
        self.events.append(("train", steps))
        return TrainStats(steps, 32 * steps, steps, 3.0, 100.0, 0.1 * steps, "steps", 1e-3, 0.5)

    def evaluate(self, n_batches: int) -> float:
        self.events.append(("evaluate", self.step))
        return 2.5

    def reset_optimizer(self) -> None:
        self.events.append(("reset",))


def _run(tmp_path, *, rounds: int, non_finite: set[int] = frozenset(), keep_optimizer: bool = True):
    fed = FederationConfig.model_validate(
        {"training": {"local_steps": 4, "eval_every": 8, "keep_optimizer_state": keep_optimizer}}
    )
    events: list = []
    ps = FakePS(events)
    trainer = FakeTrainer(events, non_finite)
    trainer.heartbeat = ps.progress.report
    site = Site(
        fed,
        client_paradigm(fed.paradigm),
        trainer,
        FakeSync(ps, events, fed),
        LinkTuner(fed, LinkMeter(), NUMEL, "t.loop"),
        NUMEL,
    )
    agent = ClientAgent(
        ClientConfig(client_id="t.loop", data=str(tmp_path), work_dir=str(tmp_path / "w"), max_rounds=rounds)
    )
    rc = agent.loop(ps, Ranks(), site)
    records = [json.loads(line) for line in agent.metrics_path.read_text().splitlines()]
    return rc, events, records, trainer.heartbeats


def test_each_round_adopts_trains_pushes_waits_and_records(tmp_path):
    rc, events, records, _ = _run(tmp_path, rounds=3)

    assert rc == 0
    assert events == [
        ("wait", 0),
        ("adopt", 1),
        ("train", 4),
        ("push", 1, 4, None),
        ("wait", 1),
        ("adopt", 2),
        ("train", 4),
        ("evaluate", 8),
        ("push", 2, 4, 2.5),
        ("wait", 2),
        ("adopt", 3),
        ("train", 4),
        ("push", 3, 4, None),  # the last round: no wait for a next model
    ]
    assert [(r["round"], r["step"], r["base_version"], r["version"], r["status"]) for r in records] == [
        (1, 4, 1, 2, "APPLIED"),
        (2, 8, 2, 3, "APPLIED"),
        (3, 12, 3, 4, "APPLIED"),
    ]
    assert [r["eval_loss"] for r in records] == [None, 2.5, None]
    assert records[0]["ratio"] == 100 / (4 * NUMEL)


def test_heartbeats_report_the_steps_and_tokens_of_the_round_in_hand_on_its_base_version(tmp_path):
    """What the PS tells a training session from a silent one by (ps_server.waiting)."""
    _, _, _, heartbeats = _run(tmp_path, rounds=3)

    assert heartbeats == [
        {"round_base_version": v, "round_steps": 4, "round_tokens": 4 * FakeTrainer.tokens_per_step}
        for v in (1, 2, 3)
    ]


def test_a_non_finite_round_pushes_nothing_and_trains_again_on_the_same_model(tmp_path):
    rc, events, records, _ = _run(tmp_path, rounds=1, non_finite={1})

    assert rc == 0
    assert events[:6] == [("wait", 0), ("adopt", 1), ("non_finite",), ("adopt", 1), ("train", 4), ("push", 1, 4, None)]
    assert len(records) == 1 and records[0]["round"] == 1


def test_three_non_finite_rounds_in_a_row_stop_the_client(tmp_path):
    with pytest.raises(NonFiniteLossError):
        _run(tmp_path, rounds=5, non_finite={1, 2, 3})


def test_without_kept_optimizer_state_every_round_after_the_first_starts_afresh(tmp_path):
    _, events, _, _ = _run(tmp_path, rounds=2, keep_optimizer=False)

    assert events.count(("reset",)) == 1
    assert events.index(("reset",)) == events.index(("adopt", 2)) + 1


class FakeOverlapSync(OverlappedRounds, FakeSync):
    """An overlapped path: `push_round` only starts the push; `settle` hands back its outcome, the model it
    led to (the PS's next version) and how long it waited (here a fixed 0.25 s, where the real path waits
    for the send and the model stream). The real path also folds the model in with the progress since."""

    def __init__(self, ps: FakePS, events: list, fed: FederationConfig) -> None:
        super().__init__(ps, events, fed)
        self.in_flight: RoundResult | None = None

    def adopt(self, model, global_model: GlobalVersion | None) -> None:
        if global_model is not self.adopted:  # as the real path: the model already based on changes nothing
            super().adopt(model, global_model)

    def push_round(self, trainer, result: RoundResult) -> None:
        assert self.in_flight is None, "one push in flight at a time"
        assert result.base is self.adopted, "a round is pushed on the model it is based on"
        self.events.append(("push", result.base.version, result.stats.steps, result.eval_loss))
        self.in_flight = result
        return None

    def settle(self, await_model: bool = True) -> Settled | None:
        if self.in_flight is None:
            return None
        base, self.in_flight = self.in_flight.base, None
        self.events.append(("settle", base.version, await_model))
        self.ps.publish(base.version + 1)
        model = self.ps.latest() if await_model else None
        return Settled(PushOutcome("APPLIED", base.version + 1, 0, 100, 0.01, "int8"), model, 0.25)


def test_overlapped_rounds_train_on_while_the_push_is_in_flight_and_record_it_when_it_settles(tmp_path):
    fed = FederationConfig.model_validate({"training": {"local_steps": 4, "eval_every": 1000}})
    events: list = []
    ps = FakePS(events)
    site = Site(
        fed,
        client_paradigm(fed.paradigm),
        FakeTrainer(events),
        FakeOverlapSync(ps, events, fed),
        LinkTuner(fed, LinkMeter(), NUMEL, "t.loop"),
        NUMEL,
    )
    agent = ClientAgent(
        ClientConfig(client_id="t.loop", data=str(tmp_path), work_dir=str(tmp_path / "w"), max_rounds=3)
    )

    assert agent.loop(ps, Ranks(), site) == 0

    assert events == [
        ("wait", 0),
        ("adopt", 1),
        ("train", 4),
        ("push", 1, 4, None),  # nothing in flight before the first push: nothing to settle
        ("train", 4),  # round 2 trains while push 1 is in flight
        ("settle", 1, True),
        ("adopt", 2),  # the model push 1 led to, folded in before push 2
        ("push", 2, 4, None),
        ("train", 4),
        ("settle", 2, True),
        ("adopt", 3),
        ("push", 3, 4, None),
        ("settle", 3, False),  # the last push: its outcome is recorded, its model not awaited
    ]
    records = [json.loads(line) for line in agent.metrics_path.read_text().splitlines()]
    assert [(r["round"], r["step"], r["base_version"], r["version"], r["status"]) for r in records] == [
        (1, 4, 1, 2, "APPLIED"),
        (2, 8, 2, 3, "APPLIED"),
        (3, 12, 3, 4, "APPLIED"),
    ]
    assert all(r["idle_s"] == 0.25 for r in records)  # the wait for the push in flight is the idle time


def test_the_paradigm_s_held_out_metrics_go_with_the_round_that_evaluated(tmp_path, monkeypatch):
    # Prepare: a paradigm whose own metrics say at which step they were taken; record what each push carried
    pushed: list[dict] = []
    push_round = FakeSync.push_round
    monkeypatch.setattr(FakeSync, "push_round",
                        lambda self, trainer, result: pushed.append(dict(result.eval_metrics))
                        or push_round(self, trainer, result))
    monkeypatch.setattr(ClientParadigm, "eval_metrics", lambda self, trainer: {"held_out": float(trainer.step)})

    # Execute: rounds of 4 steps, an evaluation every 8
    _run(tmp_path, rounds=3)

    # Assert: only the round that evaluated carries them
    assert pushed == [{}, {"held_out": 8.0}, {}]
