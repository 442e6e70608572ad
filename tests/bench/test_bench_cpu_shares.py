"""Per-process CPU shares of the benchmark harness, with real processes in real cgroups (cpu_shares.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from bench.federation.cpu_shares import CGROUP_CPU, CpuShareError, CpuShares
from bench.federation.report import cpu_line
from bench.federation.results import CurvePoint, RunResult


@pytest.fixture
def writable_cgroup() -> None:
    """These machines (and CI's) mount cgroup v1 with a writable `cpu` controller as root: without it the CPU
    shares cannot be checked, which is a failure, not a skip."""
    assert (CGROUP_CPU / "cpu.cfs_quota_us").is_file() and os.access(CGROUP_CPU, os.W_OK), (
        f"{CGROUP_CPU} is not a writable cgroup v1 cpu controller: run as root on a kernel that mounts it"
    )


needs_cgroup = pytest.mark.usefixtures("writable_cgroup")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (/proc/PID/stat fields 14 and 15)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_cgroup(pid: int) -> str:
    """The path of `pid`'s group in the v1 cpu controller, from /proc/PID/cgroup ('1:cpu:/path')."""
    for line in open(f"/proc/{pid}/cgroup").read().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    raise AssertionError(f"pid {pid} is in no cpu cgroup")


@needs_cgroup
def test_a_busy_loop_in_a_quarter_cpu_group_gets_about_a_quarter_of_a_core():
    shares = CpuShares(f"test-{uuid.uuid4().hex[:8]}", 0.25)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        group = shares.place("client-0", busy.pid)
        assert cpu_cgroup(busy.pid) == f"/{group.name}"
        assert (group / "cpu.cfs_quota_us").read_text().strip() == "25000"
        c0, t0 = cpu_seconds(busy.pid), time.monotonic()
        time.sleep(3.0)
        share = (cpu_seconds(busy.pid) - c0) / (time.monotonic() - t0)
        # The quota caps it at 0.25 (a tick of accounting slack); on two busy shared cores it may get less.
        assert 0.10 <= share <= 0.30, share
    finally:
        busy.kill()
        busy.wait()
        shares.close()
    assert not group.exists() and shares.groups == {}


@needs_cgroup
def test_close_moves_a_live_process_back_and_removes_its_group():
    shares = CpuShares(f"test-{uuid.uuid4().hex[:8]}", 0.5)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        group = shares.place("ps", sleeper.pid)
        shares.close()
        assert not group.exists()
        assert cpu_cgroup(sleeper.pid) == "/"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_shares_off_place_nothing(tmp_path):
    shares = CpuShares("run", None, root=tmp_path / "absent")
    assert shares.place("client-0", os.getpid()) is None and not shares.enabled
    shares.close()


def run(method, cpu_share, kind="federated"):
    return RunResult("s", method, kind, 10.0, 1, [CurvePoint(1.0, 1, 3.0, 100)], cpu_share=cpu_share)


def test_the_tables_say_how_the_runs_got_their_cpu():
    assert cpu_line([run("fedavg", None), run("single", None, "single")]) == (
        "CPU: processes shared the machine's cores (a waiting client's core is lent to the others)."
    )
    assert cpu_line([run("fedavg", 0.4), run("ours", 0.4)]) == (
        "CPU: each client and the PS capped at 0.4 CPU in its own cgroup (cpu.cfs_quota_us)."
    )
    mixed = cpu_line([run("fedavg", 0.4), run("ours", None)])
    assert "capped at 0.4 CPU in its own cgroup (cpu.cfs_quota_us) (sync FedAvg)" in mixed
    assert "lent to the others) (ours (defaults))" in mixed
    assert cpu_line([run("single", None, "single")]) == ""


def test_a_missing_controller_is_one_clear_error(tmp_path):
    with pytest.raises(CpuShareError, match=r"no cgroup v1 cpu controller at .*run without --cpu-share"):
        CpuShares("run", 0.5, root=tmp_path)


@pytest.mark.parametrize("cpus", [0.0, -1.0, 100.0])
def test_an_impossible_share_is_refused(cpus):
    with pytest.raises(CpuShareError, match=r"a CPU share must lie in \[0.01, 64\] CPUs"):
        CpuShares("run", cpus)
