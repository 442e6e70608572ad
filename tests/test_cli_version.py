"""`geofed --version`: what a user pastes into a bug report."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

GEOFED = str(Path(sys.executable).with_name("geofed"))


def test_version_prints_the_package_and_protocol_versions():
    out = subprocess.run([GEOFED, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"geofed {version('geofed')} (protocol geofed.v1)"
