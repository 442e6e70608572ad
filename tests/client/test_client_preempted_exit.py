"""A preempted agent leaves at once, whatever the preemption signal interrupted (its resume point is the last
sync's checkpoint, already on disk).

The SIGTERM handler raises `Preempted` wherever the main thread is, possibly inside a gRPC call or a lock of
the channel's; cleanup that waits on what it broke must not keep the pod alive (a CI run once saw a
preempted client still running 60 s after SIGTERM).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading

from client_agent.agent import _within


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
    (tmp_path / "token").write_text("t")
    flags = ["--ps", "127.0.0.1:1", "--client-id", "c", "--token-file", str(tmp_path / "token"), "--insecure",
             "--work-dir", str(tmp_path / "work"), "--data", str(tmp_path)]
    out = subprocess.run([sys.executable, "-c", script, *flags], capture_output=True, text=True, timeout=60)
    assert out.returncode == 143, out.stderr[-2000:]
    assert "event=preempted" in out.stderr
