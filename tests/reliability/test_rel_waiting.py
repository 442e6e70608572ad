"""Whom a sync round waits for, over the wire against a real `geofed ps`: the sessions it sees training.

Sessions that join and heartbeat but never train must not hold a sync round to the straggler timeout (set to
600 s here, far beyond what these tests take); a session whose heartbeats report progress on the round is
waited for until that progress stops. The PS's heartbeat interval follows the session TTL (a third of it), so
a 6 s TTL gives 2 s heartbeats and a 6 s silence bound (three of them) for a session with no timed round.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import grpc
import numpy as np

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed_testing.ledger import delta_for
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import NUMEL, Observer, delta_messages, encoded, init_model, join, push, raw_session

SESSION_TTL_S = 6.0
SILENCE_BOUND_S = 3 * SESSION_TTL_S / 3  # three heartbeat intervals
STRAGGLER_TIMEOUT_S = 600.0
PATIENCE_S = 120.0  # how long a test waits for what it expects: far less than the straggler timeout
CHUNK_PERIOD_S = 0.5  # a slow upload's pace: one payload chunk per period


class Heartbeats:
    """Heartbeats raw sessions every second, each with the report its callable gives, until closed."""

    def __init__(self, reaper: Reaper) -> None:
        self.sessions: list[tuple[pb_grpc.ParameterServerStub, str, Callable[[], pb.ClientReport]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        reaper.add(self.close)

    def add(self, stub: pb_grpc.ParameterServerStub, session: str,
            report: Callable[[], pb.ClientReport] = pb.ClientReport) -> None:
        self.sessions.append((stub, session, report))

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for stub, session, report in list(self.sessions):
                stub.Heartbeat(pb.HeartbeatRequest(report=report()), metadata=bearer(session), timeout=10)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)


def sync_ps(tmp_path, reaper: Reaper) -> PSNode:
    """A sync PS with a 600 s straggler timeout (not tuned down from round times) and a 6 s session TTL."""
    ps = PSNode(
        tmp_path / "ps",
        {"aggregation": {"mode": "sync", "straggler_timeout_s": STRAGGLER_TIMEOUT_S},
         "autotune": {"straggler_timeout": False}},
        extra=["--session-ttl-s", str(SESSION_TTL_S)], metrics=True,
    )
    reaper.add(ps.kill)
    ps.start()
    init_model(join(ps, "boot.master", master=True, start=False, reaper=reaper))
    return ps


def not_waiting_lines(ps: PSNode) -> dict[str, str]:
    """Each client the PS logged it stopped waiting for, with the reason it gave."""
    return dict(re.findall(r"event=round_not_waiting session=(\S+) reason=(\S+)", ps.logs()))


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {PATIENCE_S:.0f} s"
        time.sleep(0.2)


def test_a_sync_round_closes_on_its_training_client_without_waiting_for_idle_sessions(tmp_path, reaper):
    ps = sync_ps(tmp_path, reaper)
    observer = Observer(ps, "observer")
    version, before = observer.model()
    trainer = join(ps, "trainer", reaper=reaper)  # heartbeats with its round's progress (client_agent.progress)
    trained = {"steps": 0}
    trainer.progress.start(version, lambda: trained["steps"], tokens_per_step=128)
    beats = Heartbeats(reaper)
    for i in range(3):  # joined and heartbeating, never training
        beats.add(*raw_session(ps, f"idle{i}"))
    beats.start()

    trained["steps"] = 8
    delta = delta_for("trainer/0", NUMEL)
    assert push(trainer, version, delta, tokens=8 * 128, local_steps=8).status == "ACCEPTED"
    wait_for(lambda: observer.model()[0] > version, "the round's close")

    after_version, after = observer.model()
    assert after_version == version + 1
    applied = re.findall(r"event=apply version=(\d+) deltas=(\d+) clients=(\d+)", ps.logs())
    assert applied[-1] == (str(version + 1), "1", "1")
    assert float(np.dot(after - before, delta)) > 0  # the model moved along the trainer's delta
    quiet = not_waiting_lines(ps)
    assert {f"idle{i}" for i in range(3)} <= quiet.keys()
    assert {quiet[f"idle{i}"] for i in range(3)} == {"no_progress_since_join"}
    assert "trainer" not in quiet
    assert ps.metric("geofed_round_not_waiting_total") >= 3


def test_a_session_reporting_progress_is_waited_for_until_its_progress_stops(tmp_path, reaper):
    ps = sync_ps(tmp_path, reaper)
    observer = Observer(ps, "observer")
    version, _ = observer.model()
    fast = join(ps, "fast", reaper=reaper)  # heartbeats while it waits for the round
    slow_stub, slow_session = raw_session(ps, "slow")
    idle_stub, idle_session = raw_session(ps, "idle")
    slow = {"steps": 0, "training": True}

    def slow_report() -> pb.ClientReport:
        if slow["training"]:
            slow["steps"] += 1
        return pb.ClientReport(round_base_version=version, round_steps=slow["steps"], round_tokens=128 * slow["steps"])

    beats = Heartbeats(reaper)
    beats.add(slow_stub, slow_session, slow_report)
    beats.add(idle_stub, idle_session)
    beats.start()
    assert push(fast, version, delta_for("fast/0", NUMEL), tokens=1024, local_steps=8).status == "ACCEPTED"

    # Prepare: the idle session drops out of the round once its silence bound has passed.
    wait_for(lambda: "idle" in not_waiting_lines(ps), "the idle session's drop-out")
    # Execute: two more silence bounds while the slow session keeps reporting steps.
    time.sleep(2 * SILENCE_BOUND_S)
    # Assert: the round still waits for it.
    assert observer.model()[0] == version
    assert "slow" not in not_waiting_lines(ps)

    slow["training"] = False  # it still heartbeats, but its steps stop moving
    wait_for(lambda: observer.model()[0] > version, "the round's close once the slow session stalled")
    assert not_waiting_lines(ps)["slow"] == "no_progress_in_round"
    assert ps.metric("geofed_round_not_waiting_total") >= 2


def test_a_push_is_waited_for_while_its_bytes_arrive_and_not_once_they_stop(tmp_path, reaper):
    ps = sync_ps(tmp_path, reaper)
    observer = Observer(ps, "observer")
    version, _ = observer.model()
    fast = join(ps, "fast", reaper=reaper)
    slow_stub, slow_session = raw_session(ps, "slow")  # never reports progress: only its upload shows it
    beats = Heartbeats(reaper)
    beats.add(slow_stub, slow_session)
    beats.start()
    header, payload = encoded(delta_for("slow/0", NUMEL))
    chunks = int(2 * SILENCE_BOUND_S / CHUNK_PERIOD_S)  # its bytes arrive for two silence bounds
    messages = delta_messages(header, payload, base=version, upload_id="slow/0", chunk=-(-len(payload) // chunks))
    sending, stalled, release = threading.Event(), threading.Event(), threading.Event()

    def upload():
        """Header and payload, a chunk every half second for longer than the silence bound, then nothing."""
        yield messages[0]
        sending.set()
        for chunk in messages[1:-1]:
            time.sleep(CHUNK_PERIOD_S)
            yield chunk
        stalled.set()
        release.wait(PATIENCE_S + 60)  # the trailer never comes; the stream ends when the test is done

    def send() -> None:
        try:
            slow_stub.PushDelta(upload(), metadata=bearer(slow_session), timeout=PATIENCE_S + 120)
        except grpc.RpcError:
            pass  # refused as truncated once the stream ends

    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    def end_upload() -> None:
        """The stream ends without its trailer, and the sender's call returns (refused as truncated)."""
        release.set()
        sender.join(timeout=30)

    reaper.add(end_upload)
    assert sending.wait(30)
    assert push(fast, version, delta_for("fast/0", NUMEL), tokens=1024, local_steps=8).status == "ACCEPTED"

    # Prepare: the upload runs past the slow session's silence bound from when the PS first saw it
    wait_for(stalled.is_set, "the end of the slow session's payload bytes")
    # Assert: the round waited for the upload while its bytes arrived ...
    assert observer.model()[0] == version
    assert "slow" not in not_waiting_lines(ps)
    # ... and stops waiting once they stopped for its silence bound
    wait_for(lambda: observer.model()[0] > version, "the round's close once the upload stalled")
    assert not_waiting_lines(ps)["slow"] == "no_progress_since_join"
    applied = re.findall(r"event=apply version=(\d+) deltas=(\d+) clients=(\d+)", ps.logs())
    assert applied[-1] == (str(version + 1), "1", "1")
