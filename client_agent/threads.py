"""Small thread helpers: run a function beside the caller and take its result (or error) later."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future


def in_thread(fn: Callable[[], object], name: str = "geofed-restore") -> Future:
    """Run `fn` in a daemon thread; its result or exception comes out of the returned future."""
    done: Future = Future()

    def run() -> None:
        try:
            done.set_result(fn())
        except BaseException as exc:  # handed to whoever waits on `done`
            done.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done
