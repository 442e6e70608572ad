"""Pure builders for FSL-SAGE's server-side trainer: its Deployment, Service and state PVC.

The trainer (`python -m client_agent.split.trainer`) is its own process because the PS stays torch-free:
it runs the client image, serves the PS's certificate, checks client sessions at the (first group's) PS
with the federation's peer secret, and keeps the server-side blocks on its own PVC. Created only for a
Federation whose paradigm is fsl-sage.
"""

from __future__ import annotations

from typing import Any

from geofed_operator import names
from geofed_operator.cloud_builders import (
    CONFIG_DIR,
    CONFIG_FILE,
    PEER_DIR,
    PEER_KEY,
    TLS_DIR,
    FederationObject,
    ServedTLS,
    _tls_volume,
    claim,
    common_labels,
    exposed_service,
    peer_mount,
    peer_volume,
    read_only_container_security,
)
from geofed_operator.k8s_types import nonroot_pod_security, pod_placement
from geofed_operator.keys import k8s_dump

STATE_DIR = "/var/lib/geofed/trainer"


def trainer_selector(fed: FederationObject) -> dict[str, str]:
    """Labels that pick the trainer pod (never a PS pod)."""
    return {names.LABEL_NAME: names.TRAINER_APP, names.LABEL_INSTANCE: fed.name}


def _labels(fed: FederationObject, component: str) -> dict[str, str]:
    return {**common_labels(fed, component), **trainer_selector(fed)}


def _meta(fed: FederationObject, name: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": fed.namespace, "labels": _labels(fed, component)}


def trainer_args(fed: FederationObject, tls: ServedTLS = ServedTLS()) -> list[str]:
    """Command line of the trainer container."""
    args = [
        "python", "-m", "client_agent.split.trainer",
        "--federation", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--ps", fed.ps_address,  # the first group's PS (or the only one) vouches for client sessions
        "--peer-token-file", f"{PEER_DIR}/{PEER_KEY}",
        "--host", "0.0.0.0",
        "--port", str(fed.spec.split_trainer.port),
        "--out", STATE_DIR,
    ]  # fmt: skip
    if fed.tls_secret is None:
        return [*args, "--insecure"]
    args += ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"]
    return args + (["--ca", f"{TLS_DIR}/ca.crt"] if tls.has_ca else [])


def build_trainer_pvc(fed: FederationObject) -> dict[str, Any]:
    """PVC for the server-side blocks, so a rescheduled trainer resumes them."""
    meta = _meta(fed, names.trainer_pvc_name(fed.name), "trainer-state")
    return claim(fed, meta, fed.spec.split_trainer.storage_size)


def build_trainer_service(fed: FederationObject) -> dict[str, Any]:
    """The trainer's Service: exposed like the PS's (clients dial both), on the trainer's port."""
    meta = _meta(fed, names.trainer_name(fed.name), "trainer")
    return exposed_service(fed, meta, trainer_selector(fed), fed.spec.split_trainer.port)


def build_trainer_deployment(
    fed: FederationObject, *, config_hash: str, tls: ServedTLS = ServedTLS()
) -> dict[str, Any]:
    """One replica, Recreate (one writer of the state PVC), non-root, TCP probes on the gRPC port."""
    spec = fed.spec
    mounts = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        peer_mount(),
        {"name": "state", "mountPath": STATE_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": names.config_map_name(fed.name)}},
        peer_volume(fed),
        {"name": "state", "persistentVolumeClaim": {"claimName": names.trainer_pvc_name(fed.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if fed.tls_secret is not None:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append(_tls_volume(fed))
    probe = {"tcpSocket": {"port": "grpc"}, "timeoutSeconds": 5}
    container: dict[str, Any] = {
        "name": "trainer",
        "image": fed.trainer_image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": trainer_args(fed, tls),
        "ports": [{"name": "grpc", "containerPort": spec.split_trainer.port, "protocol": "TCP"}],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": k8s_dump(spec.split_trainer.resources),
        "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 60},
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "volumeMounts": mounts,
        "securityContext": read_only_container_security(),
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "automountServiceAccountToken": False,
        "securityContext": nonroot_pod_security(spec.pod_security_context),
    }
    pod_spec.update(pod_placement(spec))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(fed, names.trainer_name(fed.name), "trainer"),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": trainer_selector(fed)},
            "template": {
                "metadata": {
                    "labels": _labels(fed, "trainer"),
                    "annotations": {**spec.pod_annotations, names.ANNOTATION_CONFIG_HASH: config_hash},
                },
                "spec": pod_spec,
            },
        },
    }
