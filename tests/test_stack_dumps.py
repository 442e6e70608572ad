"""`kill -USR1` makes a geofed process print every thread's stack and go on (geofed.logs.enable_stack_dumps)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap


def test_sigusr1_prints_each_threads_stack_and_the_process_goes_on():
    script = textwrap.dedent("""
        import sys, threading, time
        from geofed.logs import enable_stack_dumps

        def parked_in_a_named_function():
            threading.Event().wait()

        enable_stack_dumps()
        threading.Thread(target=parked_in_a_named_function, daemon=True).start()
        print("ready", flush=True)
        sys.stdin.readline()  # the main thread waits here until told to finish
        print("still alive", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate("go\n", timeout=30)
    assert proc.returncode == 0 and "still alive" in out, err
    assert "parked_in_a_named_function" in err and "Current thread 0x" in err and err.count("hread 0x") >= 2, err
