"""A federated benchmark run with per-process CPU shares: the PS and each client in its own capped cgroup."""

from __future__ import annotations

import os
import threading

import pytest

from bench.federation.cpu_shares import CGROUP_CPU, PREFIX
from bench.federation.scenario import load_scenario
from bench.federation.suite import run_suite


def watch_groups(seen: dict[str, tuple[str, str]], stop: threading.Event) -> None:
    """Record each group of the run of method `ours` with its quota and the command line of a process in it."""
    while not stop.wait(0.2):
        for group in CGROUP_CPU.glob(f"{PREFIX}-ours-*"):
            try:
                pids = (group / "cgroup.procs").read_text().split()
                quota = (group / "cpu.cfs_quota_us").read_text().strip()
                cmd = open(f"/proc/{pids[0]}/cmdline", "rb").read().replace(b"\0", b" ").decode() if pids else ""
            except OSError:
                continue
            if cmd:
                seen[group.name] = (quota, cmd)


@pytest.mark.long
def test_each_client_and_the_ps_run_in_their_own_capped_group(tmp_path):
    assert (CGROUP_CPU / "cpu.cfs_quota_us").is_file() and os.access(CGROUP_CPU, os.W_OK), (
        f"{CGROUP_CPU} is not a writable cgroup v1 cpu controller: run as root on a kernel that mounts it"
    )
    seen: dict[str, tuple[str, str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch_groups, args=(seen, stop), daemon=True)
    watcher.start()
    try:
        (ours,) = run_suite(
            load_scenario("smoke"), ["ours"], work_root=tmp_path / "runs", results_root=tmp_path / "results",
            log=lambda _: None, cpu_share=0.5,
        )  # fmt: skip
    finally:
        stop.set()
        watcher.join()

    by_name = {name.rsplit("-", 1)[-1] if not name.endswith("ps") else "ps": v for name, v in seen.items()}
    assert set(by_name) == {"ps", "0", "1"}, seen  # client-0, client-1 and the PS
    assert {quota for quota, _ in seen.values()} == {"50000"}
    assert " ps " in by_name["ps"][1] and " client " in by_name["0"][1] and " client " in by_name["1"][1]
    assert ours.cpu_share == 0.5 and ours.curve[-1].loss < ours.curve[0].loss
    assert not list(CGROUP_CPU.glob(f"{PREFIX}-ours-*"))  # removed after the run
