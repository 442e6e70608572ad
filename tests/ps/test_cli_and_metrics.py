"""`geofed token create` / `geofed status` against a real PS, and its Prometheus endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np

from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, init_model, join, push

GEOFED = str(Path(sys.executable).with_name("geofed"))


def _run(*args):
    return subprocess.run([GEOFED, *args], capture_output=True, text=True, timeout=60)


def test_token_create_and_status_commands(tmp_path):
    ps = PSNode(tmp_path / "ps").start()
    try:
        admin = ["--ps", ps.address, "--admin-token-file", str(ps.admin_file), "--insecure"]
        out = _run("token", "create", "--client-id", "cli.one", *admin)
        assert out.returncode == 0, out.stderr
        token = out.stdout.strip()
        assert len(token) >= 32
        assert token not in ps.logs()  # secrets never reach the logs
        status = _run("status", "--json", "--clients", *admin)
        assert status.returncode == 0, status.stderr
        body = json.loads(status.stdout)
        assert body["status"]["has_model"] is False and body["status"]["federation"] == "default"
        bad = tmp_path / "wrong"
        bad.write_text("x" * 40)
        refused = _run("token", "create", "--client-id", "x", "--ps", ps.address, "--admin-token-file", str(bad),
                       "--insecure")
        assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    finally:
        ps.kill()


def test_metrics_endpoint_counts_bytes_versions_and_rejections(tmp_path):
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1}}, metrics=True).start()
    try:
        c = join(ps, "m.a", master=True)
        init_model(c)
        push(c, 1, np.full(NUMEL, 0.01, np.float32), codec="int8")
        c.wait_for_version(1, timeout=20)
        text = urllib.request.urlopen(f"http://127.0.0.1:{ps.metrics_port}/metrics", timeout=10).read().decode()
        assert "geofed_global_version 2.0" in text
        assert 'geofed_bytes_in_total{client="m.a"}' in text
        assert 'geofed_compression_ratio{client="m.a"}' in text
        assert "geofed_push_seconds_count" in text and "geofed_staleness_bucket" in text
        c.close()
    finally:
        ps.kill()
