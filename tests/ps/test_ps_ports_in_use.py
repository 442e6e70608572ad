"""`geofed ps` whose gRPC, metrics or status-page port is taken: one line naming the port and the flag."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from geofed.config import ServerConfig
from geofed_operator.federation_spec import ServiceSpec

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.parametrize(
    ("flag", "what"),
    [("--port", "the gRPC port"), ("--metrics-port", "the metrics port"), ("--status-port", "the status page")],
)
def test_a_taken_port_is_named_with_the_flag_that_moves_it(tmp_path, flag, what):
    with socket.socket() as taken:  # another server already listening there
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": "0", "--metrics-port": "0", "--status-port": "0", flag: str(port)}
        out = subprocess.run(
            [GEOFED, "ps", "--insecure", "--host", "127.0.0.1", "--metrics-host", "127.0.0.1", "--status-host",
             "127.0.0.1", "--admin-token-file", str(tmp_path / "admin.token"), "--checkpoint-dir",
             str(tmp_path / "ckpt"), *[x for kv in ports.items() for x in kv]],
            capture_output=True, text=True, timeout=60,
        )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "add_port" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if not line.startswith("ts=")]
    assert errors == [f"geofed ps: {what} 127.0.0.1:{port} is already in use (another geofed ps, or another server): "
                      f"pick another with {flag}" + ("" if flag == "--port" else " (0 turns it off)")], out.stderr


def test_the_metrics_port_defaults_off_prometheus_own_port_on_both_paths():
    # Prometheus itself listens on 9090 by default: a PS on a monitored host must not need a flag to start.
    assert ServerConfig.model_fields["metrics_port"].default != 9090
    assert ServiceSpec.model_fields["metrics_port"].default == ServerConfig.model_fields["metrics_port"].default
