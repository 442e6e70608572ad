"""Launch a test script as CPU ranks (gloo, two unless told) under torchrun."""

from __future__ import annotations

import os
import subprocess
import sys


def torchrun(script: str, *args: str, cwd, timeout: float = 240, nproc: int = 2) -> subprocess.CompletedProcess:
    """`nproc` gloo ranks of `script`, run in `cwd` (where they write their files)."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*launch, script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
