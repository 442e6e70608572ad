"""Suite-wide set-up: the processes tests start see Ctrl-C as a terminal's foreground job does."""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    """A runner started in the background (`nohup pytest &`, a CI step) ignores SIGINT, and every process a test
    starts inherits an ignored signal across exec, so no Ctrl-C a test sends would reach it. Handling SIGINT here
    (a handled signal resets to its default at exec) gives them the default, as a terminal's job has."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
