"""Pure builders for a Federation's children: the PS Deployment, Service, PVC, ConfigMap and Secrets.

Each takes the parsed Federation and returns a manifest dict; nothing here talks to the API server.
The PS builders take `group`: a Federation that declares PS groups gets one PS (Deployment, Services,
PVC, PDB) per group, named `<federation>-ps-<group>`; `group=None` is the single PS of one without.
A Federation with `psShards` > 1 runs that PS as the front (`--shard-role front`) of N shard processes
built in `shard_builders`.
The PS runs as one replica with the Recreate strategy: on a spec change the old pod gets SIGTERM,
checkpoints to the PVC, and the new pod resumes from it, so the global model survives a roll.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from geofed.config import FederationConfig
from geofed_operator import names
from geofed_operator.federation_spec import parse_federation_spec, spec_to_federation_config
from geofed_operator.k8s_types import nonroot_pod_security, pod_placement
from geofed_operator.keys import k8s_dump
from geofed_operator.tls import TLSMaterial

CONFIG_DIR = "/etc/geofed/config"
CONFIG_FILE = "federation.yaml"
ADMIN_DIR = "/etc/geofed/admin"
ADMIN_KEY = "credential"
TLS_DIR = "/etc/geofed/tls"
PEER_DIR = "/etc/geofed/peer"
PEER_KEY = "token"
CHECKPOINT_DIR = "/var/lib/geofed/checkpoints"
SHARD_PORT = 7443  # every PS shard's gRPC port (internal only: the front dials it, no client does)


@dataclass(frozen=True)
class FederationObject:
    """A Federation as the builders need it: identity plus the validated spec."""

    name: str
    namespace: str
    spec: Any  # FederationSpec (a pydantic model built from geofed.config)
    raw_spec: Mapping[str, Any]
    image: str
    trainer_image: str = ""  # the split trainer needs torch: the client image unless spec.splitTrainer names one

    @classmethod
    def from_body(cls, body: Mapping[str, Any], default_image: str, trainer_image: str = "") -> FederationObject:
        """Parse a Federation object; raises pydantic.ValidationError on a bad spec."""
        meta = body["metadata"]
        spec = parse_federation_spec(body.get("spec") or {})
        trainer = spec.split_trainer.image or trainer_image
        fed = cls(meta["name"], meta["namespace"], spec, body.get("spec") or {}, spec.image or default_image, trainer)
        _ = fed.config  # FederationConfig's own cross-field rules (psShards with groups, ...): a bad spec now
        return fed

    @property
    def groups(self) -> tuple[str | None, ...]:
        """One entry per PS: the declared group names, or (None,) for the single PS."""
        return tuple(g.name for g in self.spec.groups) or (None,)

    @property
    def shards(self) -> tuple[int, ...]:
        """Indices of the PS shards; empty for a PS that is not sharded (psShards 1)."""
        return tuple(range(self.spec.ps_shards)) if self.spec.ps_shards > 1 else ()

    def shard_address(self, index: int) -> str:
        """In-cluster host:port the front dials for one shard (its Service's full DNS name)."""
        return f"{names.ps_shard_name(self.name, index)}.{self.namespace}.svc:{SHARD_PORT}"

    @property
    def split_learning(self) -> bool:
        """Whether the federation's paradigm needs a server-side trainer (split learning: FSL-SAGE)."""
        return self.spec.paradigm.needs_trainer

    def group_host(self, group: str | None) -> str:
        """In-cluster DNS name of one PS's Service."""
        return f"{names.ps_name(self.name, group)}.{self.namespace}.svc"

    def group_address(self, group: str | None) -> str:
        """In-cluster host:port of one PS."""
        return f"{self.group_host(group)}:{self.spec.service.port}"

    @property
    def trainer_address(self) -> str:
        """In-cluster host:port of the split trainer's Service."""
        return f"{names.trainer_name(self.name)}.{self.namespace}.svc:{self.spec.split_trainer.port}"

    @property
    def config(self) -> FederationConfig:
        """What the PS loads and hands to clients at Join, with the in-cluster defaults filled in.

        A group without an address gets its PS Service's full DNS name (`<federation>-ps-<group>.<ns>.svc:
        <port>`: what the other PSs dial), and FSL-SAGE's `paradigm.trainer` the split trainer's Service.
        """
        config = spec_to_federation_config(self.raw_spec, name=self.name)
        update: dict[str, Any] = {}
        if config.groups:
            update["groups"] = [
                g.model_copy(update={"address": g.address or self.group_address(g.name)}) for g in config.groups
            ]
        if self.split_learning and not config.paradigm.trainer:
            update["paradigm"] = config.paradigm.model_copy(update={"trainer": self.trainer_address})
        return config.model_copy(update=update)

    @property
    def tls_secret(self) -> str | None:
        """The Secret the PS serves from: the named one, else ours; None when insecure."""
        if self.spec.insecure:
            return None
        return self.spec.tls_secret_name or names.tls_secret_name(self.name)

    @property
    def service_host(self) -> str:
        """In-cluster DNS name of the (first group's) PS Service."""
        return self.group_host(self.groups[0])

    @property
    def ps_address(self) -> str:
        """In-cluster host:port of the (first group's) PS."""
        return self.group_address(self.groups[0])


def selector_labels(fed: FederationObject, group: str | None = None) -> dict[str, str]:
    """Labels that pick the PS pod (and that a ServiceMonitor or NetworkPolicy can select on)."""
    labels = {names.LABEL_NAME: names.PS_APP, names.LABEL_INSTANCE: fed.name}
    return {**labels, names.LABEL_PS_GROUP: group} if group else labels


def common_labels(fed: FederationObject, component: str, group: str | None = None) -> dict[str, str]:
    """Labels of every child: recommended app labels plus the owning federation."""
    return {
        **selector_labels(fed, group),
        names.LABEL_COMPONENT: component,
        names.LABEL_PART_OF: "geofed",
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_FEDERATION: fed.name,
    }


def _meta(fed: FederationObject, name: str, component: str, group: str | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": fed.namespace, "labels": common_labels(fed, component, group)}


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


def config_hash(fed: FederationObject, tls_cert_pem: bytes | None, secrets: Sequence[bytes] = ()) -> str:
    """Changes whenever the PS must restart to see new settings, a new certificate or a new generated secret.

    The PS reads mounted files once, at start. `secrets` (the admin credential, the peer secret) enter
    only through their own SHA-256, so the hash, which is visible in annotations, reveals nothing of them.
    """
    digest = hashlib.sha256(federation_yaml(fed).encode())
    digest.update(tls_cert_pem or b"")
    for value in secrets:
        digest.update(hashlib.sha256(value).digest())
    return digest.hexdigest()[:16]


def _opaque_secret(fed: FederationObject, name: str, component: str, key: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(fed, name, component),
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode()},
    }


def build_admin_secret(fed: FederationObject, credential: str) -> dict[str, Any]:
    """Secret with the PS admin credential (enrollment and the operator's status polls use it)."""
    return _opaque_secret(fed, names.admin_secret_name(fed.name), "admin", ADMIN_KEY, credential)


def tls_names(fed: FederationObject, public_hosts: tuple[str, ...] = ()) -> list[str]:
    """Names the generated certificate covers: the Service's DNS names, localhost (probes), extras.

    `public_hosts` are the load balancer's hostnames and IPs from the Service's status: sites dial
    them, so the certificate must cover them without anyone listing them by hand.
    """
    services = [names.ps_name(fed.name, g) for g in fed.groups]
    services += [names.ps_shard_name(fed.name, i) for i in fed.shards]  # the shards serve it to the front
    if fed.split_learning:  # the trainer serves the same certificate
        services.append(names.trainer_name(fed.name))
    ns = fed.namespace
    base = [n for svc in services for n in (f"{svc}.{ns}.svc", svc, f"{svc}.{ns}", f"{svc}.{ns}.svc.cluster.local")]
    base += ["localhost", "127.0.0.1"]
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


def claim(fed: FederationObject, meta: dict[str, Any], size: Any) -> dict[str, Any]:
    """A ReadWriteOnce PVC in the spec's StorageClass (one writer pod at a time, which Recreate guarantees)."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": str(size)}}}
    if fed.spec.storage.storage_class_name is not None:
        spec["storageClassName"] = fed.spec.storage.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def build_pvc(fed: FederationObject, group: str | None = None) -> dict[str, Any]:
    """PVC for PS checkpoints."""
    return claim(fed, _meta(fed, names.pvc_name(fed.name, group), "checkpoints", group), fed.spec.storage.size)


def exposed_service(
    fed: FederationObject, meta: dict[str, Any], selector: dict[str, str], port: int, node_port: int | None = None
) -> dict[str, Any]:
    """A gRPC Service of the spec's type (sites dial it), with the spec's annotations and source ranges."""
    svc = fed.spec.service
    grpc_port: dict[str, Any] = {"name": "grpc", "port": port, "targetPort": "grpc", "protocol": "TCP"}
    grpc_port["appProtocol"] = "kubernetes.io/h2c" if fed.spec.insecure else "grpc"
    if node_port is not None:
        grpc_port["nodePort"] = node_port
    spec: dict[str, Any] = {"type": svc.type, "selector": selector, "ports": [grpc_port]}
    if svc.type == "LoadBalancer" and svc.load_balancer_source_ranges:
        spec["loadBalancerSourceRanges"] = list(svc.load_balancer_source_ranges)
    if svc.annotations:
        meta["annotations"] = dict(svc.annotations)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def build_service(fed: FederationObject, group: str | None = None) -> dict[str, Any]:
    """The public Service: gRPC on one port, the only one sites dial out to (metrics are not on it)."""
    meta = _meta(fed, names.ps_name(fed.name, group), "ps", group)
    svc = fed.spec.service
    return exposed_service(fed, meta, selector_labels(fed, group), svc.port, svc.node_port)


def build_metrics_service(fed: FederationObject, group: str | None = None) -> dict[str, Any]:
    """A ClusterIP Service for the unauthenticated metrics port (client ids, losses): in-cluster only."""
    port = {"name": "metrics", "port": fed.spec.service.metrics_port, "targetPort": "metrics", "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(fed, names.metrics_service_name(fed.name, group), "metrics", group),
        "spec": {"type": "ClusterIP", "selector": selector_labels(fed, group), "ports": [port]},
    }


def disruption_budget(meta: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    """Keeps voluntary evictions (node drains) off a healthy pod; an unready one may always be evicted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


def build_pdb(fed: FederationObject, group: str | None = None) -> dict[str, Any]:
    """Keeps node drains off a healthy PS (an unready one may always be evicted)."""
    return disruption_budget(_meta(fed, names.ps_name(fed.name, group), "ps", group), selector_labels(fed, group))


@dataclass(frozen=True)
class ServedTLS:
    """What the operator learnt about the certificate the PS serves (None fields: unknown / absent)."""

    has_ca: bool = True  # the Secret has ca.crt (ours always does)
    server_name: str | None = None  # a name the certificate covers, when it does not cover 127.0.0.1


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


def ps_args(fed: FederationObject, group: str | None = None, tls: ServedTLS | None = None) -> list[str]:
    """Command line of the PS container (a group's PS also gets its group and the peer secret)."""
    args = [
        "geofed", "ps",
        "--federation", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--host", "0.0.0.0",
        "--port", str(fed.spec.service.port),
        "--metrics-port", str(fed.spec.service.metrics_port), "--metrics-host", "0.0.0.0",
        "--checkpoint-dir", CHECKPOINT_DIR,
        "--admin-token-file", f"{ADMIN_DIR}/{ADMIN_KEY}",
    ]  # fmt: skip
    if fed.tls_secret is None:
        args.append("--insecure")
    else:
        args += ["--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"]
    if group:
        args += ["--group", group]
    if fed.shards:  # the front of a sharded PS dials every shard by its Service
        args += ["--shard-role", "front", "--shard-addresses", ",".join(fed.shard_address(i) for i in fed.shards)]
    if group or fed.shards:
        args += ["--peer-token-file", f"{PEER_DIR}/{PEER_KEY}"]
        if fed.tls_secret is not None and (tls is None or tls.has_ca):
            args += ["--peer-ca", f"{TLS_DIR}/ca.crt"]  # the other PSs (or the shards) serve the same certificate
    return args + _server_flags(fed)


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


def read_only_container_security() -> dict[str, Any]:
    """Container securityContext of the cloud's servers: no privilege, read-only root, no capabilities."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def peer_mount() -> dict[str, Any]:
    """The peer secret, read-only, in every PS of a multi-PS federation and in the split trainer."""
    return {"name": "peer", "mountPath": PEER_DIR, "readOnly": True}


def peer_volume(fed: FederationObject) -> dict[str, Any]:
    """Volume of the federation's peer-secret Secret."""
    return {"name": "peer", "secret": {"secretName": names.peer_secret_name(fed.name), "defaultMode": 0o440}}


def build_peer_secret(fed: FederationObject, token: str) -> dict[str, Any]:
    """Secret with the secret the federation's PSs (and split trainer) authenticate PS-to-PS calls with."""
    return _opaque_secret(fed, names.peer_secret_name(fed.name), "peer", PEER_KEY, token)


def _tls_volume(fed: FederationObject) -> dict[str, Any]:
    secret: dict[str, Any] = {"secretName": fed.tls_secret, "defaultMode": 0o440}
    if fed.spec.tls_secret_name is None:  # ours: keep the CA key out of the pod
        secret["items"] = [{"key": k, "path": k} for k in ("tls.crt", "tls.key", "ca.crt")]
    return {"name": "tls", "secret": secret}


def server_volumes(
    fed: FederationObject, claim_name: str, *, admin: bool, peer: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes) of a PS process: its settings, the admin Secret (the public PS only), its
    checkpoint PVC, a writable /tmp, the served certificate, and the peer secret (PS groups, shards)."""
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": names.config_map_name(fed.name)}}]
    if admin:
        mounts.append({"name": "admin", "mountPath": ADMIN_DIR, "readOnly": True})
        secret = {"secretName": names.admin_secret_name(fed.name), "defaultMode": 0o440}
        volumes.append({"name": "admin", "secret": secret})
    mounts += [{"name": "checkpoints", "mountPath": CHECKPOINT_DIR}, {"name": "tmp", "mountPath": "/tmp"}]
    volumes += [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim_name}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if fed.tls_secret is not None:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append(_tls_volume(fed))
    if peer:
        mounts.append(peer_mount())
        volumes.append(peer_volume(fed))
    return mounts, volumes


def server_probes(probe: dict[str, Any]) -> dict[str, Any]:
    """Startup, readiness and liveness probes of a PS process from one check."""
    return {
        "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 60},  # resuming a big model takes ~1 min
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 20, "failureThreshold": 6},
    }


def single_replica_deployment(
    fed: FederationObject,
    meta: dict[str, Any],
    selector: dict[str, str],
    labels: dict[str, str],
    *,
    config_hash: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    """One replica with the Recreate strategy (never two pods on one PVC and one copy of the model), non-root,
    the spec's placement, the config hash on the pod so a settings change rolls it."""
    spec = fed.spec
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": spec.termination_grace_period_s,
        "automountServiceAccountToken": False,
        "securityContext": nonroot_pod_security(spec.pod_security_context),
    }
    pod_spec.update(pod_placement(spec))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {**spec.pod_annotations, names.ANNOTATION_CONFIG_HASH: config_hash},
                },
                "spec": pod_spec,
            },
        },
    }


def build_ps_deployment(
    fed: FederationObject, *, config_hash: str, tls: ServedTLS = ServedTLS(), group: str | None = None
) -> dict[str, Any]:
    """The PS Deployment: one replica, Recreate, exec probes, non-root, checkpoints on the PVC."""
    spec = fed.spec
    probe = {"exec": {"command": probe_command(fed, tls)}, "timeoutSeconds": 5}
    claim_name = names.pvc_name(fed.name, group)
    mounts, volumes = server_volumes(fed, claim_name, admin=True, peer=bool(group or fed.shards))
    container: dict[str, Any] = {
        "name": "ps",
        "image": fed.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ps_args(fed, group, tls),
        "ports": [
            {"name": "grpc", "containerPort": spec.service.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": spec.service.metrics_port, "protocol": "TCP"},
        ],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": k8s_dump(spec.resources),
        **server_probes(probe),
        "volumeMounts": mounts,
        "securityContext": read_only_container_security(),
    }
    meta = _meta(fed, names.ps_name(fed.name, group), "ps", group)
    return single_replica_deployment(
        fed, meta, selector_labels(fed, group), common_labels(fed, "ps", group),
        config_hash=config_hash, container=container, volumes=volumes,
    )  # fmt: skip
