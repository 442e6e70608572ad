"""The layering contract holds, and `python -m` works from a checkout's root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_layers_hold():
    """`lint-imports` checks the contracts in pyproject.toml: apps > PS | client | operator > geofed."""
    # Execute
    out = subprocess.run([Path(sys.executable).with_name("lint-imports"), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)

    # Assert
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize("module", ["pip", "ps_server", "client_agent", "geofed_apps", "geofed_operator"])
def test_python_dash_m_works_from_the_repository_root(module):
    """`python -m` puts the working directory first on sys.path; the checkout's folders must not get in the way."""
    # Execute
    out = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)

    # Assert
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage" in out.stdout.lower()
