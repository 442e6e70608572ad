"""The PS image run exactly as the operator's Deployment runs it: read-only root, uid 10001, no capabilities,
no privilege escalation, checkpoints on the PVC, /tmp an emptyDir. A real client installs the model and
pushes deltas to it; the global version advances and checkpoints land on the volume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import PS_IMAGE, Pods, admin, require, start_ps, training_text

pytestmark = pytest.mark.containers
MASTER = "uw.gpu0"


def test_ps_serves_pushes_under_the_operators_security_context(pods: Pods, tmp_path: Path) -> None:
    # Prepare
    require(PS_IMAGE)
    ps = start_ps(pods, server={"masterClientID": MASTER})
    security = ps.pod_spec["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["capabilities"]["drop"] == ["ALL"]
    assert ps.pod_spec["securityContext"]["runAsUser"] == 10001
    with admin(ps) as a:
        token, _ = a.create_token(MASTER, "uw", 600, True)
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(ps.ca_pem)

    # Execute: the host's client, the federation's master: it installs Θ0 and pushes two deltas
    client = subprocess.run(
        [sys.executable, "-m", "geofed_apps", "client", "--ps", ps.address, "--client-id", MASTER,
         "--token-file", str(tmp_path / "token"), "--ca", str(tmp_path / "ca.crt"),
         "--data", str(training_text(tmp_path / "data")), "--work-dir", str(tmp_path / "work"),
         "--device", "cpu", "--max-rounds", "2", "--join-timeout-s", "60", "--model-wait-timeout-s", "120"],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip

    # Assert
    logs = ps.container.logs()
    assert client.returncode == 0, f"client:\n{client.stderr[-3000:]}\nPS:\n{logs[-3000:]}"
    with admin(ps) as a:
        version = a.status()["version"]
    assert version >= 2, f"global version {version} after two pushes\n{logs[-3000:]}"
    checkpoints = sorted(ps.checkpoints.glob("ps-v*.safetensors"))
    assert checkpoints and checkpoints[-1].name == f"ps-v{version:012d}.safetensors", checkpoints
    assert checkpoints[-1].stat().st_uid == 10001  # written by the pod's user, through fsGroup
    assert list((ps.tmp / "numba").rglob("*.nbi")), "numba's kernel cache is not on the /tmp emptyDir"
    assert "cannot cache" not in logs and "no writable numba cache" not in logs

    # The root filesystem really is read-only, and the PS really runs without capabilities.
    probe = ps.container.exec(["python", "-c", "open('/opt/geofed/x', 'w')"], 30)
    assert probe.returncode != 0 and "Read-only file system" in probe.stderr
    caps = ps.container.exec(["sh", "-c", "grep CapEff /proc/self/status"], 30)
    assert caps.stdout.split() == ["CapEff:", "0000000000000000"]

    # A grace period of the pod's own length: SIGTERM checkpoints and exits cleanly.
    assert ps.container.stop(grace_s=ps.pod_spec["terminationGracePeriodSeconds"]) == 0, ps.container.logs()[-3000:]
