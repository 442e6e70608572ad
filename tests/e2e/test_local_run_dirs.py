"""`geofed local` run directories: two runs started in the same second each get their own."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from geofed_apps.run_dir import new_run_dir

GEOFED = str(Path(sys.executable).with_name("geofed"))


def test_runs_in_the_same_second_get_distinct_readable_directories(tmp_path):
    now = time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, -1))
    got: list[Path] = []
    start = threading.Barrier(8)

    def one() -> None:
        start.wait()
        got.append(new_run_dir(tmp_path / "runs", now))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    names = sorted(p.name for p in got)
    assert names == sorted(["20260304-050607", *(f"20260304-050607-{n}" for n in range(2, 9))])
    assert all(p.is_dir() and p.parent == (tmp_path / "runs").resolve() for p in got)


def test_two_local_runs_started_at_once_both_get_a_run_directory(tmp_path):
    # Data too small to split (one file for 3 clients and a held-out share): each run creates its run
    # directory, then stops with one line.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("one file")
    cmd = [GEOFED, "local", "--data", str(tmp_path / "data"), "--run-dir", str(tmp_path / "runs")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]

    for p, (_, err) in zip(procs, outs, strict=True):
        assert "Traceback" not in err and "FileExistsError" not in err, err
        assert p.returncode == 2 and re.search(r"geofed local: only 1 groups to share among 4 clients", err), err
    made = sorted(d.name for d in (tmp_path / "runs").iterdir())
    assert len(made) == 2 and all(re.fullmatch(r"\d{8}-\d{6}(-\d+)?", n) for n in made), made
