"""A server's main thread waits for SIGTERM or SIGINT and returns it, whichever thread the kernel handed the
signal to (geofed.stop_signals.wait_for_stop_signal)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_taken_by_another_thread_ends_the_wait(sig):
    script = textwrap.dedent(f"""
        import signal, sys, threading, time
        from geofed.stop_signals import wait_for_stop_signal

        def take_the_signal():
            before = signal.getsignal({int(sig)})
            while signal.getsignal({int(sig)}) is before:  # until the wait below handles it
                time.sleep(0.01)
            # This thread, not the main one, takes the signal: the kernel does so only sometimes, this always.
            signal.pthread_kill(threading.get_ident(), {int(sig)})

        threading.Thread(target=take_the_signal, daemon=True).start()
        print(wait_for_stop_signal().name, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sig.name


def test_other_signals_do_not_end_the_wait():
    script = textwrap.dedent("""
        import signal, sys, threading, time
        from geofed.stop_signals import wait_for_stop_signal

        def ready_once_waiting():
            while signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                time.sleep(0.01)
            print("ready", flush=True)

        signal.signal(signal.SIGUSR2, lambda *_: print("usr2", flush=True))
        threading.Thread(target=ready_once_waiting, daemon=True).start()
        print(wait_for_stop_signal((signal.SIGTERM,)).name, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR2)
        assert proc.stdout.readline().strip() == "usr2"
        assert proc.poll() is None  # still waiting
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "SIGTERM"
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
