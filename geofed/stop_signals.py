"""The main thread's wait for a stop signal (SIGTERM from the kubelet, Ctrl-C's SIGINT) in a server process."""

from __future__ import annotations

import signal
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
POLL_S = 0.2  # the longest a stop signal taken by another thread waits for the main thread


def wait_for_stop_signal(signals: tuple[signal.Signals, ...] = STOP_SIGNALS, poll_s: float = POLL_S) -> signal.Signals:
    """Handle `signals`, block until one of them arrives, and return it. Call from the main thread.

    The kernel hands a process's signal to any thread that does not block it (a server's are mostly gRPC's),
    and Python runs the handler only when the main thread next runs bytecode: a main thread asleep in an untimed
    lock wait (`Event.wait()`) would sleep on for good. The wait is sliced instead, so the handler runs within
    `poll_s` whichever thread took the signal.
    """
    received: list[int] = []
    for sig in signals:
        signal.signal(sig, lambda signum, _frame: received.append(signum))
    while not received:
        time.sleep(poll_s)
    return signal.Signals(received[0])
