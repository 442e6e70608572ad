"""Pure builders for a Federation's children: the PS Deployment, Service, PVC, ConfigMap and Secrets.

Each takes the parsed Federation and returns a manifest dict; nothing here talks to the API server.
The PS runs as one replica with the Recreate strategy: on a spec change the old pod gets SIGTERM,
checkpoints to the PVC, and the new pod resumes from it, so the global model survives a roll.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from geofed.config import FederationConfig
from geofed_operator import names
from geofed_operator.federation_spec import parse_federation_spec, spec_to_federation_config
from geofed_operator.k8s_types import pod_placement
from geofed_operator.keys import k8s_dump
from geofed_operator.tls import TLSMaterial

CONFIG_DIR = "/etc/geofed/config"
CONFIG_FILE = "federation.yaml"
ADMIN_DIR = "/etc/geofed/admin"
ADMIN_KEY = "credential"
TLS_DIR = "/etc/geofed/tls"
CHECKPOINT_DIR = "/var/lib/geofed/checkpoints"
RUN_AS = 10001  # the non-root user of the images (images/*.Dockerfile)


@dataclass(frozen=True)
class FederationObject:
    """A Federation as the builders need it: identity plus the validated spec."""

    name: str
    namespace: str
    spec: Any  # FederationSpec (a pydantic model built from geofed.config)
    raw_spec: Mapping[str, Any]
    image: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any], default_image: str) -> FederationObject:
        """Parse a Federation object; raises pydantic.ValidationError on a bad spec."""
        meta = body["metadata"]
        spec = parse_federation_spec(body.get("spec") or {})
        return cls(meta["name"], meta["namespace"], spec, body.get("spec") or {}, spec.image or default_image)

    @property
    def config(self) -> FederationConfig:
        """What the PS loads and hands to clients at Join."""
        return spec_to_federation_config(self.raw_spec, name=self.name)

    @property
    def tls_secret(self) -> str | None:
        """The Secret the PS serves from: the named one, else ours; None when insecure."""
        if self.spec.insecure:
            return None
        return self.spec.tls_secret_name or names.tls_secret_name(self.name)

    @property
    def service_host(self) -> str:
        """In-cluster DNS name of the PS Service."""
        return f"{names.ps_name(self.name)}.{self.namespace}.svc"

    @property
    def ps_address(self) -> str:
        """In-cluster host:port of the PS."""
        return f"{self.service_host}:{self.spec.service.port}"


def selector_labels(fed: FederationObject) -> dict[str, str]:
    """Labels that pick the PS pod (and that a ServiceMonitor or NetworkPolicy can select on)."""
    return {names.LABEL_NAME: names.PS_APP, names.LABEL_INSTANCE: fed.name}


def common_labels(fed: FederationObject, component: str) -> dict[str, str]:
    """Labels of every child: recommended app labels plus the owning federation."""
    return {
        **selector_labels(fed),
        names.LABEL_COMPONENT: component,
        names.LABEL_PART_OF: "geofed",
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_FEDERATION: fed.name,
    }


def _meta(fed: FederationObject, name: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": fed.namespace, "labels": common_labels(fed, component)}


def federation_yaml(fed: FederationObject) -> str:
    """The `--federation` file of the PS: FederationConfig in its own snake_case form."""
    return yaml.safe_dump(fed.config.model_dump(mode="json"), sort_keys=False)


def build_config_map(fed: FederationObject) -> dict[str, Any]:
    """ConfigMap with `federation.yaml`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(fed, names.config_map_name(fed.name), "config"),
        "data": {CONFIG_FILE: federation_yaml(fed)},
    }


def config_hash(fed: FederationObject, tls_cert_pem: bytes | None) -> str:
    """Changes whenever the PS must restart to see new settings or a new certificate (mounted files don't)."""
    digest = hashlib.sha256(federation_yaml(fed).encode())
    digest.update(tls_cert_pem or b"")
    return digest.hexdigest()[:16]


def build_admin_secret(fed: FederationObject, credential: str) -> dict[str, Any]:
    """Secret with the PS admin credential (enrollment and the operator's status polls use it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(fed, names.admin_secret_name(fed.name), "admin"),
        "type": "Opaque",
        "data": {ADMIN_KEY: base64.b64encode(credential.encode()).decode()},
    }


def tls_names(fed: FederationObject, public_hosts: tuple[str, ...] = ()) -> list[str]:
    """Names the generated certificate covers: the Service's DNS names, localhost (probes), extras.

    `public_hosts` are the load balancer's hostnames and IPs from the Service's status: sites dial
    them, so the certificate must cover them without anyone listing them by hand.
    """
    svc = names.ps_name(fed.name)
    base = [
        f"{svc}.{fed.namespace}.svc",
        svc,
        f"{svc}.{fed.namespace}",
        f"{svc}.{fed.namespace}.svc.cluster.local",
        "localhost",
        "127.0.0.1",
    ]
    extra = [*fed.spec.tls.dns_names, *fed.spec.tls.ip_addresses, *public_hosts]
    return base + [n for i, n in enumerate(extra) if n not in base and n not in extra[:i]]


def build_tls_secret(fed: FederationObject, material: TLSMaterial, cert_names: list[str]) -> dict[str, Any]:
    """kubernetes.io/tls Secret with the generated certificate and its CA certificate (what sites copy)."""
    meta = _meta(fed, names.tls_secret_name(fed.name), "tls")
    meta["annotations"] = {names.ANNOTATION_TLS_NAMES: ",".join(cert_names)}
    data = {"tls.crt": material.cert_pem, "tls.key": material.key_pem, "ca.crt": material.ca_pem}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def build_ca_secret(fed: FederationObject, material: TLSMaterial) -> dict[str, Any]:
    """The private CA (certificate and key) that re-issues the server certificate; read by the operator only."""
    data = {"ca.crt": material.ca_pem, "ca.key": material.ca_key_pem}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(fed, names.ca_secret_name(fed.name), "ca"),
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def build_pvc(fed: FederationObject) -> dict[str, Any]:
    """PVC for PS checkpoints (ReadWriteOnce: one PS pod at a time, which Recreate guarantees)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(fed.spec.storage.size)}},
    }
    if fed.spec.storage.storage_class_name is not None:
        spec["storageClassName"] = fed.spec.storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(fed, names.pvc_name(fed.name), "checkpoints"),
        "spec": spec,
    }


def build_service(fed: FederationObject) -> dict[str, Any]:
    """The public Service: gRPC on one port, the only one sites dial out to (metrics are not on it)."""
    svc = fed.spec.service
    grpc_port: dict[str, Any] = {"name": "grpc", "port": svc.port, "targetPort": "grpc", "protocol": "TCP"}
    grpc_port["appProtocol"] = "kubernetes.io/h2c" if fed.spec.insecure else "grpc"
    if svc.node_port is not None:
        grpc_port["nodePort"] = svc.node_port
    spec: dict[str, Any] = {"type": svc.type, "selector": selector_labels(fed), "ports": [grpc_port]}
    if svc.type == "LoadBalancer" and svc.load_balancer_source_ranges:
        spec["loadBalancerSourceRanges"] = list(svc.load_balancer_source_ranges)
    meta = _meta(fed, names.ps_name(fed.name), "ps")
    if svc.annotations:
        meta["annotations"] = dict(svc.annotations)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def build_metrics_service(fed: FederationObject) -> dict[str, Any]:
    """A ClusterIP Service for the unauthenticated metrics port (client ids, losses): in-cluster only."""
    port = {"name": "metrics", "port": fed.spec.service.metrics_port, "targetPort": "metrics", "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(fed, names.metrics_service_name(fed.name), "metrics"),
        "spec": {"type": "ClusterIP", "selector": selector_labels(fed), "ports": [port]},
    }


def build_pdb(fed: FederationObject) -> dict[str, Any]:
    """Keeps voluntary evictions (node drains) off a healthy PS; an unready one may always be evicted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(fed, names.ps_name(fed.name), "ps"),
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": selector_labels(fed)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _server_flags(fed: FederationObject) -> list[str]:
    """`--kebab-case value` for every PS setting in the spec's `server` section."""
    flags: list[str] = []
    for name, value in fed.spec.server.model_dump(mode="json").items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):  # BooleanOptionalAction switches
            flags.append(flag if value else f"--no-{flag[2:]}")
        elif value is not None:
            flags += [flag, str(value)]
    return flags


def ps_args(fed: FederationObject) -> list[str]:
    """Command line of the PS container."""
    args = [
        "geofed", "ps",
        "--federation", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--host", "0.0.0.0",
        "--port", str(fed.spec.service.port),
        "--metrics-port", str(fed.spec.service.metrics_port),
        "--checkpoint-dir", CHECKPOINT_DIR,
        "--admin-token-file", f"{ADMIN_DIR}/{ADMIN_KEY}",
    ]  # fmt: skip
    if fed.tls_secret is None:
        args.append("--insecure")
    else:
        args += ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"]
    return args + _server_flags(fed)


@dataclass(frozen=True)
class ServedTLS:
    """What the operator learnt about the certificate the PS serves (None fields: unknown / absent)."""

    has_ca: bool = True  # the Secret has ca.crt (ours always does)
    server_name: str | None = None  # a name the certificate covers, when it does not cover 127.0.0.1


def probe_command(fed: FederationObject, tls: ServedTLS = ServedTLS()) -> list[str]:
    """A real gRPC health check over the same TLS the clients use (ps_server.probe exits 0 or 1)."""
    cmd = ["python", "-m", "ps_server.probe", "--port", str(fed.spec.service.port)]
    if fed.tls_secret is None:
        return [*cmd, "--insecure"]
    if tls.has_ca:
        cmd += ["--ca", f"{TLS_DIR}/ca.crt"]
    if tls.server_name:
        cmd += ["--server-name", tls.server_name]
    return cmd


def _tls_volume(fed: FederationObject) -> dict[str, Any]:
    secret: dict[str, Any] = {"secretName": fed.tls_secret, "defaultMode": 0o440}
    if fed.spec.tls_secret_name is None:  # ours: keep the CA key out of the pod
        secret["items"] = [{"key": k, "path": k} for k in ("tls.crt", "tls.key", "ca.crt")]
    return {"name": "tls", "secret": secret}


def build_ps_deployment(fed: FederationObject, *, config_hash: str, tls: ServedTLS = ServedTLS()) -> dict[str, Any]:
    """The PS Deployment: one replica, Recreate, exec probes, non-root, checkpoints on the PVC."""
    spec = fed.spec
    probe = {"exec": {"command": probe_command(fed, tls)}, "timeoutSeconds": 5}
    mounts = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "admin", "mountPath": ADMIN_DIR, "readOnly": True},
        {"name": "checkpoints", "mountPath": CHECKPOINT_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": names.config_map_name(fed.name)}},
        {"name": "admin", "secret": {"secretName": names.admin_secret_name(fed.name), "defaultMode": 0o440}},
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": names.pvc_name(fed.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if fed.tls_secret is not None:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append(_tls_volume(fed))
    container: dict[str, Any] = {
        "name": "ps",
        "image": fed.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ps_args(fed),
        "ports": [
            {"name": "grpc", "containerPort": spec.service.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": spec.service.metrics_port, "protocol": "TCP"},
        ],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": k8s_dump(spec.resources),
        "startupProbe": {
            **probe,
            "periodSeconds": 5,
            "failureThreshold": 60,
        },  # resuming a big model takes ~1 min
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 20, "failureThreshold": 6},
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": spec.termination_grace_period_s,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    pod_spec.update(pod_placement(spec))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(fed, names.ps_name(fed.name), "ps"),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two PS pods on one PVC and one global model
            "selector": {"matchLabels": selector_labels(fed)},
            "template": {
                "metadata": {
                    "labels": common_labels(fed, "ps"),
                    "annotations": {**spec.pod_annotations, names.ANNOTATION_CONFIG_HASH: config_hash},
                },
                "spec": pod_spec,
            },
        },
    }
