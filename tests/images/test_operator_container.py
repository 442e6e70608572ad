"""The operator image run as the chart's Deployment runs it (read-only root, uid 10001, no capabilities):
everything it imports is installed, kopf starts and serves the chart's liveness probe, and with no API
server to reach it stops at logging in (the emulator-backed runs are the kubelet tests' job)."""

from __future__ import annotations

import os
import time

import pytest

from tests.k8s.test_chart import render

from .conftest import PREFIX, Pods, require

pytestmark = pytest.mark.containers
OPERATOR_IMAGE = os.environ.get("GEOFED_OPERATOR_IMAGE", f"{PREFIX}/operator:dev")


def test_operator_image_starts_from_the_charts_deployment(pods: Pods) -> None:
    # Prepare
    require(OPERATOR_IMAGE)
    docs = render({"role": "cloud"})
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    for doc in docs:
        if doc["kind"] in ("ConfigMap", "Secret"):
            pods.add(doc)
    pod_spec = deployment["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    probe = container["livenessProbe"]["httpGet"]
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["port"])
    url = f"http://127.0.0.1:{port}{probe['path']}"

    # Execute: a network namespace of its own (the chart's fixed port must not meet the host's)
    operator = pods.start("geofed-operator-0", pod_spec, OPERATOR_IMAGE, network="none")
    deadline = time.monotonic() + 90
    while "LoginError" not in (logs := operator.logs()) and time.monotonic() < deadline:
        assert operator.running(), logs[-3000:]
        time.sleep(1)
    check = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).status)"
    live = operator.exec(["python", "-c", check], 30)

    # Assert
    assert "LoginError" in logs, logs[-3000:]
    assert "ModuleNotFoundError" not in logs and "ImportError" not in logs
    assert live.stdout.strip() == "200", live.stderr[-2000:]
    assert operator.running()
