"""The other ranks of a `torchrun` client wait out rank 0's network work without timing out.

Rank 0 alone talks to the PS, and its waits are long: the first global model, a push retried through a
PS outage (`retry_budget_s`), a synchronous round that closes when the slowest site pushes. A rank that
spends such a wait inside one collective dies when the process-group timeout expires (10 min for NCCL).
Here rank 0 runs the work on a thread and broadcasts a small status every `poll_s` seconds instead:
each collective completes within `poll_s`, however long the work takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")
WAITING, DONE, FAILED = 0, 1, 2


class LeaderFailedError(RuntimeError):
    """Rank 0's work raised; it reports the error itself, the other ranks stop."""


def leader_wait(
    work: Callable[[], T],
    *,
    leader: bool,
    bcast: Callable[[torch.Tensor], torch.Tensor] | None,
    poll_s: float = 5.0,
) -> T | None:
    """Run `work` on rank 0 while the other ranks wait; returns its result on rank 0, None elsewhere.

    `bcast` broadcasts a tensor from rank 0 (None when the client is a single process: `work` just runs).
    `poll_s` must stay well below the process-group timeout. An exception in `work` is re-raised on rank 0
    and becomes `LeaderFailedError` on the others.
    """
    if bcast is None:
        return work()
    if not leader:
        while True:
            state = int(bcast(torch.tensor([WAITING], dtype=torch.int64)).item())
            if state == DONE:
                return None
            if state == FAILED:
                raise LeaderFailedError("rank 0 failed while the other ranks waited for it (see rank 0's log)")
    outcome: dict[str, object] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread below
            outcome["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=run, name="geofed-leader-work", daemon=True).start()
    while True:
        done = finished.wait(poll_s)
        state = WAITING if not done else (FAILED if "error" in outcome else DONE)
        bcast(torch.tensor([state], dtype=torch.int64))
        if done:
            break
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
