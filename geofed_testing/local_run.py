"""`geofed local` as a user runs it (a real subprocess), and what its output says: for end-to-end tests."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

GEOFED = str(Path(sys.executable).with_name("geofed"))


@dataclass
class LocalRun:
    stdout: str
    first_loss: float | None  # from the closing `eval loss: A -> B` line; None if it is missing
    last_loss: float | None
    run_dir: Path | None

    def line(self, pattern: str) -> re.Match | None:
        """A whole line of stdout matching `pattern`."""
        return re.search(pattern, self.stdout, re.MULTILINE)


def run_local(run_dir: Path, *args: str, timeout: float = 400) -> LocalRun:
    """`geofed local --run-dir run_dir --quiet ARGS`; asserts it exits 0 (showing the output's tail if not)."""
    out = subprocess.run([GEOFED, "local", "--run-dir", str(run_dir), "--quiet", *args],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    loss = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    run = re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE)
    return LocalRun(out.stdout, float(loss.group(1)) if loss else None, float(loss.group(2)) if loss else None,
                    Path(run.group(1)) if run else None)
