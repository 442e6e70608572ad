"""`geofed local --ps-groups 2`: two PS groups, clients split across them, rings between the PSs."""

from __future__ import annotations

import numpy as np
import pytest

from geofed_testing.local_run import run_local
from ps_server.checkpoint import CheckpointStore


@pytest.mark.slow  # ~75 s on 2 cores; tests/ps/test_ps_groups_e2e.py covers the ring in the default suite
def test_two_ps_groups_learn_and_end_with_the_same_model(tmp_path):
    """The model learns, the summary names the rings, and both PSs' final checkpoints are bit-identical."""
    # Execute
    out = run_local(tmp_path, "--clients", "2", "--ps-groups", "2", "--duration", "30")
    # Assert
    rings = out.line(r"^ring all-reduces: (\d+) \(2 PS groups\)$")
    assert out.first_loss is not None and rings, out.stdout[-2000:]
    assert out.first_loss - out.last_loss > 1.0
    assert int(rings.group(1)) >= 2
    run = out.run_dir
    g0, g1 = (CheckpointStore(run / "ps" / g / "ckpt").load_latest() for g in ("g0", "g1"))
    assert g0.version == g1.version >= 3
    assert np.array_equal(g0.flat, g1.flat)
    # Each client trained against its own group's PS
    for i, g in ((0, "g0"), (1, "g1")):
        assert f"client=local.client-{i}" in (run / "logs" / f"ps-{g}.log").read_text()
        assert f"client=local.client-{i}" not in (run / "logs" / f"ps-{'g1' if g == 'g0' else 'g0'}.log").read_text()
