"""`geofed local --renamings`: bad values are refused before a run directory is made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--paradigm", "lora", "--renamings", "-1"], "geofed local: --renamings must be 0 or more, got -1"),
        (["--renamings", "4"], "geofed local: --renamings needs --paradigm"),
    ],
)
def test_a_renamings_value_that_cannot_apply_is_refused_before_anything_starts(tmp_path, flags, message):
    out = subprocess.run([GEOFED, "local", *flags, "--run-dir", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=60)

    assert out.returncode == 2
    assert message in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()
