"""Bad input to `geofed client`: one readable line and a non-zero exit, never a bare traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from geofed_testing.procs import PSNode

GEOFED = str(Path(sys.executable).with_name("geofed"))


def _run(*args, timeout=120):
    return subprocess.run([GEOFED, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("setup", "code", "fragment"),
    [
        ("missing_dir", 2, "does not exist"),
        ("empty_dir", 2, "no"),
        ("unreachable", 3, "unreachable"),
    ],
)
def test_client_fails_with_one_readable_line(tmp_path, setup, code, fragment):
    data = tmp_path / "data"
    if setup == "empty_dir":
        data.mkdir()
    elif setup == "unreachable":
        data.mkdir()
        (data / "a.txt").write_text("hello world " * 2000)
    (tmp_path / "token").write_text("not-a-real-token")
    out = _run("client", "--ps", "127.0.0.1:1", "--client-id", "x.y", "--token-file", str(tmp_path / "token"),
               "--data", str(data), "--work-dir", str(tmp_path / "w"), "--insecure", "--join-timeout-s", "3")
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("geofed client:") and fragment in last.lower()


def test_bad_federation_setting_is_refused_by_name(tmp_path):
    out = _run("local", "--set", "model.n_head=3", "--run-dir", str(tmp_path))
    assert out.returncode == 2
    assert "n_embd (128) must be divisible by n_head (3)" in out.stderr


def test_unknown_setting_is_refused(tmp_path):
    out = _run("local", "--set", "training.lrr=0.1", "--run-dir", str(tmp_path))
    assert out.returncode == 2 and "training.lrr" in out.stderr


def test_bad_token_exits_with_auth_error(tmp_path):
    ps = PSNode(tmp_path / "ps").start()
    try:
        data = tmp_path / "data"
        data.mkdir()
        (data / "a.txt").write_text("hello world " * 2000)
        (tmp_path / "token").write_text("forged-token-forged-token")
        out = _run("client", "--ps", ps.address, "--client-id", "x.y", "--token-file", str(tmp_path / "token"),
                   "--data", str(data), "--work-dir", str(tmp_path / "w"), "--insecure")
        assert out.returncode == 3
        assert "token refused" in out.stderr.strip().splitlines()[-1]
    finally:
        ps.kill()
