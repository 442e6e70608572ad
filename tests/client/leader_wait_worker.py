"""Two gloo ranks with a 2 s process-group timeout; rank 0's "network work" takes three times that.

Run by `test_client_leader_wait.py`. Each rank writes what it saw to `<out>.<rank>.json`. The last
step is the control: the same wait spent in one plain broadcast times out.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from client_agent.training.fsdp import init_distributed
from client_agent.training.leader_wait import LeaderFailedError, leader_wait

TIMEOUT_S = 2.0
WORK_S = 3 * TIMEOUT_S


def bcast(t: torch.Tensor) -> torch.Tensor:
    dist.broadcast(t, src=0)
    return t


def slow_work() -> str:
    time.sleep(WORK_S)  # stands for a PS that answers late
    return "model"


def failing_work() -> str:
    time.sleep(WORK_S)
    raise ValueError("push refused")


def run(out: Path) -> None:
    rank, _ = init_distributed(timeout_s=TIMEOUT_S)
    seen: dict[str, object] = {"rank": rank}
    t0 = time.monotonic()
    seen["result"] = leader_wait(slow_work, leader=rank == 0, bcast=bcast, poll_s=TIMEOUT_S / 4)
    seen["waited_s"] = time.monotonic() - t0
    after = torch.tensor([rank + 1])
    dist.all_reduce(after)  # the group is still usable afterwards
    seen["after"] = int(after)
    try:
        leader_wait(failing_work, leader=rank == 0, bcast=bcast, poll_s=TIMEOUT_S / 4)
    except (ValueError, LeaderFailedError) as exc:
        seen["failure"] = type(exc).__name__
    # Control: without leader_wait, rank 1 spends the same wait inside one broadcast.
    try:
        if rank == 0:
            time.sleep(WORK_S)
        bcast(torch.tensor([1]))
        seen["plain"] = "completed"
    except RuntimeError as exc:
        seen["plain"] = "timed out" if "timed out" in str(exc).lower() or "timeout" in str(exc).lower() else str(exc)
    Path(f"{out}.{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    run(Path(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
