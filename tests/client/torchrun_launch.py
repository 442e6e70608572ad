"""Launch a test script as two CPU ranks (gloo) under torchrun."""

from __future__ import annotations

import os
import subprocess
import sys


def torchrun(script: str, *args: str, cwd, timeout: float = 240) -> subprocess.CompletedProcess:
    """Two gloo ranks of `script`, run in `cwd` (where they write their files)."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*launch, script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
