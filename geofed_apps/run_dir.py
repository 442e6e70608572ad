"""A fresh run directory under a parent folder, named for when it started and never shared by two runs."""

from __future__ import annotations

import time
from pathlib import Path


def new_run_dir(parent: str | Path, now: float | None = None) -> Path:
    """Create and return `parent/YYYYmmdd-HHMMSS` (local time of `now`, default the current time).

    Runs started in the same second get `-2`, `-3`, ... appended. Each candidate is created with an exclusive
    mkdir, so two processes racing for one name get different directories."""
    root = Path(parent).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    n = 1
    while True:
        run = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run.mkdir()
        except FileExistsError:
            n += 1
            continue
        return run
