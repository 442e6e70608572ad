"""Preemption: SIGTERM stops the agent at once, wherever its main thread is, and the process is gone within
`PREEMPTED_DEADLINE_S` whatever that thread does next.

The kernel hands a process-directed signal to any of the process's threads that does not block it (gRPC's
pollers, the model preload, a push in flight). Python runs the handler in the main thread only, and a main
thread asleep in a lock wait (`Event.wait`, `Thread.join`, `Queue.get`) wakes only for a signal sent to it
itself: a SIGTERM taken by another thread would leave the agent asleep until the kubelet's SIGKILL. So the
signal's arrival is also read from the interpreter's wakeup file descriptor (written by the C-level handler in
whichever thread took it), and a watcher thread re-sends SIGTERM to the main thread until its handler has run.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PREEMPTED_EXIT = 143  # 128 + SIGTERM: the agent stopped on a preemption signal
PREEMPTED_DEADLINE_S = 20.0  # a preempted agent is gone by then, whatever its main thread was doing
NUDGE_EVERY_S = 0.05  # how often the watcher re-sends SIGTERM to a main thread that has not taken it yet


class Preempted(BaseException):
    """SIGTERM arrived: stop at once; the last sync's checkpoint is the resume point.

    A BaseException, like KeyboardInterrupt: the handler raises it wherever the main thread is, and the
    `except Exception` of a library on the way (logging's `emit` is one) must not swallow it."""


# Plain flags, not Events: the handler runs between any two bytecodes of the main thread, so it takes no lock.
_signalled = False  # a preemption signal has arrived (set by the watcher or by the handler, whichever is first)
_raised = False  # the main thread's handler has raised Preempted for it
_armed = False


def preempted() -> bool:
    """Whether a preemption signal has arrived."""
    return _signalled


def arm_preemption() -> None:
    """From now on SIGTERM raises `Preempted` once in the main thread, and the process ends with
    `PREEMPTED_EXIT` `PREEMPTED_DEADLINE_S` after it in case the main thread never unwinds (a hung call, a
    handler that caught it). Call from the main thread; a second call changes nothing."""
    global _armed
    if _armed:
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the interpreter refuses a blocking wakeup descriptor
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _raise_preempted)
    threading.Thread(target=_watch, args=(read_end,), name="geofed-preempt-watchdog", daemon=True).start()
    _armed = True


def _raise_preempted(signum, frame):
    global _signalled, _raised
    _signalled = True
    if _raised:
        return  # a repeat (the watcher's re-send, a second SIGTERM) does not interrupt the way out
    _raised = True
    raise Preempted()


def _watch(wakeups: int) -> None:
    global _signalled
    while signal.SIGTERM not in os.read(wakeups, 512):  # one byte per signal taken, in whichever thread
        pass
    _signalled = True
    deadline = time.monotonic() + PREEMPTED_DEADLINE_S
    main = threading.main_thread().ident
    while not _raised and time.monotonic() < deadline:
        signal.pthread_kill(main, signal.SIGTERM)  # wakes a main thread asleep in a lock wait
        time.sleep(NUDGE_EVERY_S)
    time.sleep(max(0.0, deadline - time.monotonic()))
    # No logging here: the main thread may hold a handler's lock. One write, then out.
    os.write(2, f"event=preempted_exit_forced after_s={PREEMPTED_DEADLINE_S:g}\n".encode())
    os._exit(PREEMPTED_EXIT)
