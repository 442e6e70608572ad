"""The numba kernels work where no cache location is writable (a read-only root filesystem, as the operator
runs the PS): they compile without an on-disk cache and say so once, instead of failing to import."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import numpy as np
from geofed.codec import _grid_kernels, _huffman_kernels, _sparse_kernels, model_delta as md
from client_agent.connection import _grid_apply_kernel
assert _grid_kernels.__file__.startswith(SRC), _grid_kernels.__file__
rng = np.random.default_rng(0)
have = rng.normal(0, 0.02, 50_000).astype(np.float32)
new = (have + rng.standard_t(3.0, have.size) * 1e-4).astype(np.float32)
e0 = md.choose_exponents(have, None, None, 8.0)
p0 = md.snap_to_grid(have, e0)
e1 = md.choose_exponents(new, p0, e0, 8.0)
p1 = md.snap_to_grid(new, e1)
payload = md.encode(p0, e0, p1, e1)
assert payload is not None
assert np.array_equal(md.decode(p0, payload).view(np.uint32), p1.view(np.uint32))
assert md._kernels() is _grid_kernels
print("round trip ok")
"""


def _read_only_copy() -> Path:
    """The first-party packages copied into a directory of their own, modes read-only."""
    root = Path(tempfile.mkdtemp(prefix="geofed-ro-"))
    for package in ("geofed", "client_agent"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return root


def _unwritable(src: Path, argv: list[str]) -> list[str]:
    """`argv` run where `src` cannot be written: modes suffice for a user; root gets a read-only bind mount
    of it in a mount namespace of its own (root ignores modes)."""
    if os.geteuid() != 0:
        return argv
    q = shlex.quote(str(src))
    mount = f"mount --bind {q} {q} && mount -o remount,bind,ro {q} && exec {shlex.join(argv)}"
    return ["unshare", "--mount", "sh", "-c", mount]


def test_kernels_compile_and_run_without_any_writable_cache_location():
    """Package directory unwritable, NUMBA_CACHE_DIR and the user cache unwritable: the codec still round-trips."""
    # Prepare
    src = _read_only_copy()
    env = {
        **os.environ,
        "PYTHONPATH": str(src),
        "NUMBA_CACHE_DIR": "/dev/null/numba",  # cannot be created, not even by root
        "XDG_CACHE_HOME": "/dev/null/cache",
        "HOME": "/dev/null",
        "GEOFED_HUFFMAN": "numba",
    }

    # Execute
    try:
        out = subprocess.run(
            _unwritable(src, [sys.executable, "-c", f"SRC = {str(src)!r}\n" + SCRIPT]),
            env=env, cwd="/", capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
    finally:
        for path in [src, *src.rglob("*")]:
            path.chmod(0o755)
        shutil.rmtree(src)

    # Assert
    assert out.returncode == 0, out.stderr[-3000:]
    assert "round trip ok" in out.stdout
    warnings = [line for line in out.stderr.splitlines() if "no writable numba cache" in line]
    assert len(warnings) == 1, out.stderr[-3000:]
    assert "NUMBA_CACHE_DIR" in warnings[0]
