"""`geofed local`'s banner names its PS and a `geofed status` line that works on the running federation."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

GEOFED = str(Path(sys.executable).with_name("geofed"))


def test_the_banner_prints_a_status_command_that_works_while_the_run_lasts(tmp_path):
    local = subprocess.Popen(
        [GEOFED, "local", "--clients", "1", "--duration", "120", "--run-dir", str(tmp_path / "runs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert local.stdout is not None
        for line in local.stdout:
            seen.append(line)
            if line.startswith("parameter server: ") or len(seen) > 40:
                break
        banner = seen[-1]
        assert banner.startswith("parameter server: 127.0.0.1:"), "".join(seen)
        address = banner.split()[2].rstrip(";")
        command = shlex.split(banner.split("its status: ", 1)[1])
        assert command[:2] == ["geofed", "status"] and command[command.index("--ps") + 1] == address, banner
        out = subprocess.run([GEOFED, *command[1:], "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["status"]["federation"] == "local"
    finally:
        os.kill(local.pid, signal.SIGINT)  # Ctrl-C: geofed local stops its PS and clients
        try:
            # Stopping waits up to 30 s for the clients and 60 s for the PS's last checkpoint (geofed_apps.launch);
            # beyond that the run is stuck, and the error names the run's logs.
            local.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            logs = sorted(str(p) for p in (tmp_path / "runs").glob("*/logs/*.log"))
            raise AssertionError(f"geofed local did not stop within 120 s of Ctrl-C; its logs: {logs}") from None
        finally:
            if local.poll() is None:
                os.killpg(local.pid, signal.SIGKILL)
