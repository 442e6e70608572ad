"""What the client has trained of the round in hand, for its heartbeats.

The PS waits for a session in a sync round only while it sees it move (ps_server.waiting): every heartbeat
carries the global version the round trains on and the steps and tokens trained since. The training loop
names the round's start; the heartbeat thread reads the step counter it was given, so nothing in the loop
itself reports each step.
"""

from __future__ import annotations

from collections.abc import Callable


class RoundProgress:
    """The round in hand: its base version and the steps (and so tokens) trained on it since it began.

    `start` is called by the training loop, `report` by the heartbeat thread; both only read or replace plain
    attributes, so no lock is needed.
    """

    def __init__(self) -> None:
        self._base_version = 0
        self._steps: Callable[[], int] = lambda: 0
        self._first_step = 0
        self._tokens_per_step = 0

    def start(self, base_version: int, steps: Callable[[], int], tokens_per_step: int) -> None:
        """A round on `base_version` begins; `steps()` is the trainer's running step count."""
        self._steps, self._first_step = steps, steps()
        self._tokens_per_step = tokens_per_step
        self._base_version = base_version

    def report(self) -> dict[str, int]:
        """The heartbeat's progress fields; empty before the first round (nothing is trained yet)."""
        if self._base_version <= 0:
            return {}
        steps = max(0, self._steps() - self._first_step)
        return {
            "round_base_version": self._base_version,
            "round_steps": steps,
            "round_tokens": steps * self._tokens_per_step,
        }
