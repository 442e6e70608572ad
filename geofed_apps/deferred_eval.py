"""The launcher's global evaluator, built once every client has taken its first step.

Building it imports the model code and initialises a model: seconds of CPU that, on a small machine, the
clients would otherwise wait for while they import, join and build their own.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Generic, TypeVar

E = TypeVar("E")

FIRST_STEP = "event=first_step "


class DeferredEvaluation(Generic[E]):
    """`build()` then `initial(evaluator)` in a thread, started when each client's log shows its first step or
    the client has exited (at the latest `wait_s` after construction); `said(initial)` reports the result."""

    def __init__(
        self,
        build: Callable[[], E],
        initial: Callable[[E], float],
        clients: Sequence[tuple[subprocess.Popen, Path]],
        said: Callable[[float], None],
        wait_s: float = 120.0,
        poll_s: float = 0.2,
    ) -> None:
        self._future: Future[tuple[E, float]] = Future()
        self._clients, self._wait_s, self._poll_s = list(clients), wait_s, poll_s

        def run() -> None:
            try:
                self._wait_for_first_steps()
                evaluator = build()
                loss = initial(evaluator)
                said(loss)
                self._future.set_result((evaluator, loss))
            except BaseException as exc:  # handed to whoever takes the result
                self._future.set_exception(exc)

        threading.Thread(target=run, name="geofed-evaluator", daemon=True).start()

    def _wait_for_first_steps(self) -> None:
        deadline = time.monotonic() + self._wait_s
        while time.monotonic() < deadline and not all(_started(p, log) for p, log in self._clients):
            time.sleep(self._poll_s)

    def ready(self) -> E | None:
        """The evaluator once built and the initial loss taken, else None (never waits)."""
        if not self._future.done() or self._future.exception() is not None:
            return None
        return self._future.result()[0]

    def result(self) -> tuple[E, float]:
        """(evaluator, initial loss), waiting for them; the build's error is raised here."""
        return self._future.result()


def _started(proc: subprocess.Popen, log: Path) -> bool:
    if proc.poll() is not None:
        return True
    try:
        return FIRST_STEP in log.read_text(errors="replace")
    except OSError:
        return False
