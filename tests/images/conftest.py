"""Running the images built by `make images` as the operator's pods (geofed_testing.podman).

Container tests carry the `containers` marker (`make test-images`). Where podman or an image is missing
they fail with what to install or build; they never skip.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from geofed.protocol.admin_client import AdminClient
from geofed_apps.launch import free_port
from geofed_operator import names
from geofed_operator.cloud_builders import (
    FederationObject,
    build_admin_secret,
    build_config_map,
    build_ps_deployment,
    build_tls_secret,
    config_hash,
    tls_names,
)
from geofed_operator.tls import issue_self_signed
from geofed_testing.podman import PODMAN, Container, missing_tools, own_for_fs_group, project, run_args

PREFIX = os.environ.get("GEOFED_IMAGE_PREFIX", "localhost/geofed")
PS_IMAGE = os.environ.get("GEOFED_PS_IMAGE", f"{PREFIX}/ps:dev")
CLIENT_IMAGE = os.environ.get("GEOFED_CLIENT_IMAGE", f"{PREFIX}/client:dev-cpu")
# CPU-sized: the example's shape with a model that trains in seconds on two cores.
SMALL = {
    "model": {"family": "gpt2", "nLayer": 1, "nHead": 2, "nEmbd": 32, "blockSize": 32},
    "training": {"localSteps": 3, "syncIntervalSeconds": 20, "batchSize": 2},
    "resources": {},
}


def require(image: str) -> None:
    """Fail (never skip) when containers cannot run here or `image` has not been built."""
    why = missing_tools()
    if why:
        where = " (.ci/run installs it)" if os.environ.get("CI") else ""
        pytest.fail(f"container tests need podman: {why}{where}")
    found = subprocess.run([*PODMAN, "image", "exists", image], capture_output=True, check=False, timeout=60)
    if found.returncode != 0:
        pytest.fail(f"image {image} is not built: run `make images`")


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's or ConfigMap's data as the kubelet would write it (Secrets' values base64-decoded)."""
    if obj["kind"] == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    return {k: v.encode() for k, v in (obj.get("data") or {}).items()}


class Pods:
    """Starts pods' first containers with their volumes on the host; removes every container at the end.
    Container names end in the kubelet root's unique name: concurrent test runs on one host never collide.

    `objects` are the Secrets and ConfigMaps the pods may read, `claims` the host directory of each PVC
    (they outlive the pods), `host_paths` maps a hostPath volume's path to a host directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects: dict[tuple[str, str], dict[str, bytes]] = {}
        self.claims: dict[str, Path] = {}
        self.host_paths: dict[str, Path] = {}
        self.started: list[Container] = []

    def add(self, obj: Mapping[str, Any]) -> None:
        self.objects[(obj["kind"], obj["metadata"]["name"])] = secret_data(obj)

    def claim(self, name: str) -> Path:
        path = self.claims.setdefault(name, self.root / "claims" / name)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def lookup(self, kind: str, name: str) -> Mapping[str, str] | None:
        data = self.objects.get((kind, name))
        return None if data is None else {k: v.decode() for k, v in data.items()}

    def _volumes(self, name: str, pod_spec: Mapping[str, Any]) -> dict[str, Path]:
        fs_group = (pod_spec.get("securityContext") or {}).get("fsGroup")
        out: dict[str, Path] = {}
        for volume in pod_spec.get("volumes", []):
            if "secret" in volume or "configMap" in volume:
                kind, ref = ("Secret", volume["secret"]["secretName"]) if "secret" in volume else \
                    ("ConfigMap", volume["configMap"]["name"])  # fmt: skip
                path = self.root / "pods" / name / volume["name"]
                project(volume, self.objects.get((kind, ref)), path)
                read_only = True
            elif "persistentVolumeClaim" in volume:
                path = self.claim(volume["persistentVolumeClaim"]["claimName"])
                read_only = False
            elif "hostPath" in volume:
                path = self.host_paths[volume["hostPath"]["path"]]
                read_only = None  # the kubelet leaves a node directory's ownership alone
            else:
                continue  # emptyDir: created by run_args
            if fs_group is not None and read_only is not None:
                own_for_fs_group(path, fs_group, read_only=read_only)
            out[volume["name"]] = path
        return out

    def start(self, name: str, pod_spec: Mapping[str, Any], image: str, network: str = "host") -> Container:
        container = pod_spec["containers"][0]
        argv = run_args(
            pod_spec, container, name=f"{name}-{self.root.name}", volumes=self._volumes(name, pod_spec),
            lookup=self.lookup, fields={"metadata.name": name}, pod_dir=self.root / "pods" / name, image=image,
            network=network,
        )  # fmt: skip
        started = Container.start(argv)
        self.started.append(started)
        return started

    def empty_dir(self, pod: str, volume: str) -> Path:
        return self.root / "pods" / pod / "empty-dirs" / volume

    def close(self) -> None:
        for started in reversed(self.started):
            started.remove()


@pytest.fixture()
def pods() -> Iterator[Pods]:
    """A kubelet root of its own, traversable by the containers' uid (pytest's tmp_path is not)."""
    root = Path(tempfile.mkdtemp(prefix="geofed-pods-"))
    root.chmod(0o755)
    runner = Pods(root)
    try:
        yield runner
    finally:
        runner.close()
        shutil.rmtree(root, ignore_errors=True)


def wait_ready(container: Container, probe: Mapping[str, Any], timeout_s: float) -> None:
    """Run the pod's exec probe until it succeeds (the startup probe's job); raise with the logs if never."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not container.running():
            raise AssertionError(f"{container.name} exited {container.exit_code()}:\n{container.logs()[-4000:]}")
        if container.exec(probe["exec"]["command"], probe.get("timeoutSeconds", 1)).returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"{container.name} not ready after {timeout_s} s:\n{container.logs()[-4000:]}")


@dataclass(frozen=True)
class RunningPS:
    """A PS pod started from the operator's own Deployment, and what a site needs to reach it."""

    container: Container
    pod_spec: dict[str, Any]
    address: str  # 127.0.0.1:port (host network)
    admin_credential: str
    ca_pem: bytes
    checkpoints: Path  # the PVC's host directory
    tmp: Path  # the /tmp emptyDir's host directory


def start_ps(pods: Pods, name: str = "demo", **spec: Any) -> RunningPS:
    """The Federation's PS Deployment, ConfigMap and Secrets as the operator builds them, its pod running
    `PS_IMAGE` with exactly that pod spec; returns once the pod's own startup probe passes."""
    port, metrics_port = free_port(), free_port()
    body = {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {**SMALL, "service": {"port": port, "metricsPort": metrics_port}, **spec},
    }
    fed = FederationObject.from_body(body, default_image=PS_IMAGE)
    material = issue_self_signed(tls_names(fed))
    credential = secrets.token_urlsafe(24)
    for obj in (build_config_map(fed), build_admin_secret(fed, credential),
                build_tls_secret(fed, material, tls_names(fed))):  # fmt: skip
        pods.add(obj)
    deployment = build_ps_deployment(fed, config_hash=config_hash(fed, material.cert_pem))
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_name = f"{deployment['metadata']['name']}-0"
    container = pods.start(pod_name, pod_spec, PS_IMAGE)
    wait_ready(container, pod_spec["containers"][0]["startupProbe"], timeout_s=120)
    return RunningPS(
        container, pod_spec, f"127.0.0.1:{port}", credential, material.ca_pem,
        pods.claim(names.pvc_name(name, None)), pods.empty_dir(pod_name, "tmp"),
    )  # fmt: skip


def admin(ps: RunningPS) -> AdminClient:
    return AdminClient(ps.address, ps.admin_credential, ca_cert=ps.ca_pem)


def training_text(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "a.txt").write_text("some private text for the client to train on. " * 400)
    directory.chmod(0o755)
    (directory / "a.txt").chmod(0o644)
    return directory
