"""The test node's container runtime: pods run as podman containers of the images `make images` builds."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest

from .conftest import wait_for
from .emulator import GeofedEmulator
from .kubelet import Kubelet
from .node.podman_runtime import PodmanRuntime, image_config
from .node.testing import NS, node_root
from .objects import create, get

__all__ = ["node_root"]
pytestmark = [pytest.mark.containers, pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator),
              pytest.mark.timeout(300)]  # fmt: skip
IMAGE = "localhost/geofed/ps:dev"


@pytest.fixture()
def images() -> dict:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed (CI installs it; see .ci/run)")
    return {IMAGE: image_config(IMAGE)}


def status(api: GeofedEmulator, name: str) -> dict:
    return (get(api, "v1/pods", NS, name) or {}).get("status") or {}


async def test_a_pod_runs_as_a_container_under_the_operators_security_context(
    api: GeofedEmulator, node_root: Path, images: dict
) -> None:
    """uid 10001, read-only root, no capabilities, a read-only Secret and a writable emptyDir, in the PS image."""
    await create(api, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "admin", "namespace": NS},
                       "data": {"credential": base64.b64encode(b"s3cret").decode()}})  # fmt: skip
    script = ("id -u; cat /etc/admin/credential; echo; touch /x 2>&1 || true; echo w > /etc/admin/y 2>&1 || true; "
              "grep CapEff /proc/self/status; echo ok > /tmp/t && cat /tmp/t; "
              "python -c 'import geofed; print(geofed.__file__)'")  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ps", "namespace": NS}, "spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
        "volumes": [{"name": "admin", "secret": {"secretName": "admin", "defaultMode": 0o440}},
                    {"name": "tmp", "emptyDir": {}}],
        "containers": [{"name": "ps", "image": IMAGE, "command": ["sh", "-c", script],
                        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "admin", "mountPath": "/etc/admin", "readOnly": True},
                                         {"name": "tmp", "mountPath": "/tmp"}]}]}}  # fmt: skip
    async with Kubelet(api, node_root, runtime=PodmanRuntime(), images=images) as kubelet:
        await create(api, pod)
        await wait_for(lambda: status(api, "ps").get("phase") in ("Succeeded", "Failed"), 120, "the pod finished")
        log = kubelet.pods["ps"].log.read_text()
    assert status(api, "ps")["phase"] == "Succeeded", log
    lines = log.splitlines()
    assert lines[:2] == ["10001", "s3cret"]
    assert log.count("Read-only file system") == 2  # the root and the Secret volume
    assert "CapEff:\t0000000000000000" in log and "ok" in lines
    assert lines[-1].startswith("/opt/geofed/")  # the image's own geofed, not the checkout's


async def test_preemption_stops_the_container_with_its_grace_period(
    api: GeofedEmulator, node_root: Path, images: dict
) -> None:
    script = "trap 'echo term; sleep 1; echo checkpointed; exit 143' TERM; echo up; while true; do sleep 0.1; done"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "polite", "namespace": NS}, "spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 10,
        "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", script]}]}}  # fmt: skip
    async with Kubelet(api, node_root, runtime=PodmanRuntime(), images=images) as kubelet:
        await create(api, pod)
        # The container's first output can reach its log before the runtime's start call has returned.
        await wait_for(lambda: kubelet.pods["polite"].container is not None and kubelet.pods["polite"].log.exists()
                       and "up" in kubelet.pods["polite"].log.read_text(), 120, "the container up")  # fmt: skip
        log, container = kubelet.pods["polite"].log, kubelet.pods["polite"].container
        await kubelet.preempt("polite")
        assert get(api, "v1/pods", NS, "polite")["metadata"]["deletionTimestamp"]
        await wait_for(lambda: get(api, "v1/pods", NS, "polite") is None, 60, "the pod gone once stopped")
    assert "checkpointed" in log.read_text() and container.poll() == 143
