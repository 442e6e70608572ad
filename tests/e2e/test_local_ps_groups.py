"""`geofed local --ps-groups 2`: two PS groups, clients split across them, rings between the PSs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ps_server.checkpoint import CheckpointStore

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.slow  # ~75 s on 2 cores; tests/ps/test_ps_groups_e2e.py covers the ring in the default suite
def test_two_ps_groups_learn_and_end_with_the_same_model(tmp_path):
    """The model learns, the summary names the rings, and both PSs' final checkpoints are bit-identical."""
    # Execute
    out = subprocess.run(
        [GEOFED, "local", "--clients", "2", "--ps-groups", "2", "--duration", "30", "--run-dir", str(tmp_path),
         "--quiet"],
        capture_output=True, text=True, timeout=400,
    )
    # Assert
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    loss = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    rings = re.search(r"^ring all-reduces: (\d+) \(2 PS groups\)$", out.stdout, re.MULTILINE)
    assert loss and rings, out.stdout[-2000:]
    assert float(loss.group(1)) - float(loss.group(2)) > 1.0
    assert int(rings.group(1)) >= 2
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))
    g0, g1 = (CheckpointStore(run / "ps" / g / "ckpt").load_latest() for g in ("g0", "g1"))
    assert g0.version == g1.version >= 3
    assert np.array_equal(g0.flat, g1.flat)
    # Each client trained against its own group's PS
    for i, g in ((0, "g0"), (1, "g1")):
        assert f"client=local.client-{i}" in (run / "logs" / f"ps-{g}.log").read_text()
        assert f"client=local.client-{i}" not in (run / "logs" / f"ps-{'g1' if g == 'g0' else 'g0'}.log").read_text()
