"""A preempted agent leaves at once, whatever the preemption signal interrupted (its resume point is the last
sync's checkpoint, already on disk).

The SIGTERM handler raises `Preempted` wherever the main thread is, possibly inside a gRPC call or a lock of
the channel's or a logging handler's; neither cleanup that waits on what it broke nor a handler that catches
exceptions may keep the pod alive.
"""

from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from client_agent.agent import _within
from client_agent.preemption import Preempted


def _client_cli(script: str, tmp_path) -> list[str]:
    """The command line that runs `script` with a client's flags (a PS that is never dialled)."""
    (tmp_path / "token").write_text("t")
    return [sys.executable, "-c", script, "--ps", "127.0.0.1:1", "--client-id", "c", "--token-file",
            str(tmp_path / "token"), "--insecure", "--work-dir", str(tmp_path / "work"), "--data", str(tmp_path)]


def test_a_hung_cleanup_is_abandoned_after_its_bound_and_logged(caplog):
    release = threading.Event()
    started = threading.Event()

    def close() -> None:  # stands in for a channel close waiting on a lock the signal left held
        started.set()
        release.wait()

    with caplog.at_level(logging.WARNING, logger="geofed.client"):
        _within(close, 0.2)
    assert started.is_set() and not release.is_set()  # it ran, and we did not wait for it to finish
    assert "event=close_abandoned after_s=0.2" in caplog.text
    release.set()


def test_the_cli_exits_143_even_with_a_thread_that_never_ends(tmp_path):
    # Without the hard exit, interpreter shutdown joins the non-daemon thread below and the process never ends.
    script = textwrap.dedent("""
        import sys, threading
        from client_agent import agent, cli
        def run(self):
            threading.Thread(target=threading.Event().wait, daemon=False).start()
            print("event=preempted", file=sys.stderr)
            return 143

        agent.ClientAgent.run = run
        sys.exit(cli.main(sys.argv[1:]))
    """)
    out = subprocess.run(_client_cli(script, tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 143, out.stderr[-2000:]
    assert "event=preempted" in out.stderr


def test_an_error_that_the_interrupted_code_raises_on_the_way_out_still_exits_143(tmp_path):
    # A library's cleanup may find its state half-changed by the signal and raise an error of its own in
    # place of Preempted: stand-in for that, a set-up that turns the interruption into a RuntimeError. A real
    # library does so only when the signal lands at an unlucky instruction; this one does it every time.
    script = textwrap.dedent("""
        import sys, threading
        from client_agent import agent, cli, preemption
        def set_up(*args):
            try:  # "ready" inside the try: the signal may be taken as soon as print returns
                print("ready", flush=True)
                threading.Event().wait()
            except preemption.Preempted as exc:
                raise RuntimeError("cannot release un-acquired lock") from exc

        agent.set_up = set_up
        sys.exit(cli.main(sys.argv[1:]))
    """)
    proc = subprocess.Popen(_client_cli(script, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        code, err = proc.wait(60), proc.stderr.read()
        assert code == 143, err[-2000:]
        assert "event=preempted client=c raised=RuntimeError('cannot release un-acquired lock')" in err
    finally:
        proc.kill()
        proc.wait()


def test_a_signal_taken_by_another_thread_wakes_a_main_thread_asleep_in_a_lock_wait(tmp_path):
    # The kernel may hand SIGTERM to any thread (gRPC's pollers are always there); Python runs the handler only
    # in the main thread, which sleeps on in a lock wait unless a signal is sent to it itself. Here a helper
    # thread takes the signal for certain: it sends SIGTERM to itself. The kernel hands a thread other than
    # main the signal only sometimes (more often under load), and that thread is one of gRPC's, not ours.
    script = textwrap.dedent("""
        import signal, sys, threading, time
        from client_agent import agent, cli
        def take_the_signal():
            time.sleep(0.5)  # the main thread is asleep in the wait below by then
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

        def set_up(*args):
            threading.Thread(target=take_the_signal, daemon=True).start()
            threading.Event().wait()

        agent.set_up = set_up
        sys.exit(cli.main(sys.argv[1:]))
    """)
    out = subprocess.run(_client_cli(script, tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 143, out.stderr[-2000:]
    assert "event=preempted client=c\n" in out.stderr  # the main thread raised Preempted and unwound
    assert "preempted_exit_forced" not in out.stderr  # not the deadline's exit


def test_an_error_without_a_preemption_signal_is_not_taken_for_one(tmp_path):
    script = textwrap.dedent("""
        import sys
        from client_agent import agent, cli
        def set_up(*args):
            raise RuntimeError("a bug")

        agent.set_up = set_up
        sys.exit(cli.main(sys.argv[1:]))
    """)
    out = subprocess.run(_client_cli(script, tmp_path), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "RuntimeError: a bug" in out.stderr and "event=preempted" not in out.stderr


def test_preempted_passes_through_a_logging_handler_that_is_writing():
    # logging's emit turns any Exception into a "Logging error" and carries on: SIGTERM landing in a log
    # call must still stop the agent.
    class Interrupted(io.StringIO):
        def write(self, s: str) -> int:
            raise Preempted()

    logger = logging.getLogger("geofed.test.preempted")
    handler = logging.StreamHandler(Interrupted())
    logger.addHandler(handler)
    try:
        with pytest.raises(Preempted):
            logger.warning("a line being written when the signal lands")
    finally:
        logger.removeHandler(handler)


def test_a_main_thread_that_swallows_the_preemption_is_ended_by_the_watchdog():
    script = textwrap.dedent("""
        import sys, time
        from client_agent import preemption
        preemption.PREEMPTED_DEADLINE_S = 0.5
        preemption.arm_preemption()
        ready = False
        while True:  # worst case: a handler on the way catches everything
            try:  # "ready" and the loop inside the try: the one signal is swallowed wherever it is taken
                if not ready:
                    ready = True
                    print("ready", flush=True)
                while True:
                    time.sleep(0.01)
            except BaseException:
                pass
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        assert "event=preempted_exit_forced after_s=0.5" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
