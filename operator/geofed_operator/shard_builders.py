"""Pure builders for the shards of a sharded PS: per shard a Deployment, Service, PVC and PDB.

A Federation with `psShards: N > 1` keeps the single PS's objects for the front (the public Service, TLS,
admin Secret, checkpoints of the registry and committed version; `--shard-role front`, see
`cloud_builders.ps_args`) and gets N shard processes, each holding one contiguous slice of the flat
model (~model/N in memory and on disk). Shard i is `<federation>-ps-shard-<i>`: one replica with the
Recreate strategy (never two writers of its slice on one PVC), a ClusterIP Service on port 7443 the
front dials with the federation's peer secret (no client ever dials a shard), and its own PVC, so a
restarted shard restores its slice at the committed version while the others keep theirs.
"""

from __future__ import annotations

from typing import Any

from geofed_operator import names
from geofed_operator.cloud_builders import (
    CHECKPOINT_DIR,
    CONFIG_DIR,
    CONFIG_FILE,
    PEER_DIR,
    PEER_KEY,
    SHARD_PORT,
    TLS_DIR,
    FederationObject,
    claim,
    common_labels,
    disruption_budget,
    read_only_container_security,
    server_probes,
    server_volumes,
    single_replica_deployment,
)
from geofed_operator.keys import k8s_dump


def shard_selector(fed: FederationObject, index: int) -> dict[str, str]:
    """Labels that pick shard `index`'s pod: its own app name, so the front's Service never selects it."""
    return {names.LABEL_NAME: names.PS_SHARD_APP, names.LABEL_INSTANCE: fed.name, names.LABEL_PS_SHARD: str(index)}


def _meta(fed: FederationObject, name: str, component: str, index: int) -> dict[str, Any]:
    labels = {**common_labels(fed, component), **shard_selector(fed, index)}
    return {"name": name, "namespace": fed.namespace, "labels": labels}


def shard_args(fed: FederationObject, index: int) -> list[str]:
    """Command line of shard `index` (the contract of ps_server/shards: no admin token, metrics, status page)."""
    args = [
        "geofed", "ps",
        "--federation", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--shard-role", "shard",
        "--shard-index", str(index),
        "--host", "0.0.0.0",
        "--port", str(SHARD_PORT),
        "--peer-token-file", f"{PEER_DIR}/{PEER_KEY}",
        "--checkpoint-dir", CHECKPOINT_DIR,
        "--metrics-port", "0",
        "--status-port", "0",
    ]  # fmt: skip
    if fed.tls_secret is None:
        return [*args, "--insecure"]
    # The federation's certificate, which covers every shard Service's name (cloud_builders.tls_names).
    return [*args, "--tls-cert", f"{TLS_DIR}/tls.crt", "--tls-key", f"{TLS_DIR}/tls.key"]


def build_shard_service(fed: FederationObject, index: int) -> dict[str, Any]:
    """ClusterIP Service of one shard: internal only, whatever type the front's public Service has."""
    port = {"name": "grpc", "port": SHARD_PORT, "targetPort": "grpc", "protocol": "TCP"}
    port["appProtocol"] = "kubernetes.io/h2c" if fed.tls_secret is None else "grpc"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(fed, names.ps_shard_name(fed.name, index), "ps-shard", index),
        "spec": {"type": "ClusterIP", "selector": shard_selector(fed, index), "ports": [port]},
    }


def build_shard_pvc(fed: FederationObject, index: int) -> dict[str, Any]:
    """PVC of one shard's slice checkpoints and staged pushes, of the spec's storage size and class."""
    meta = _meta(fed, names.shard_pvc_name(fed.name, index), "checkpoints", index)
    return claim(fed, meta, fed.spec.storage.size)


def build_shard_pdb(fed: FederationObject, index: int) -> dict[str, Any]:
    """As the PS's: a drain must not evict a healthy shard (every push waits for all of them)."""
    meta = _meta(fed, names.ps_shard_name(fed.name, index), "ps-shard", index)
    return disruption_budget(meta, shard_selector(fed, index))


def build_shard_deployment(fed: FederationObject, index: int, *, config_hash: str) -> dict[str, Any]:
    """One shard: one replica, Recreate, the PS's image, resources and placement, TCP probes.

    TCP, not `ps_server.probe`: that probe asks for the ParameterServer health service, which a shard
    does not serve; a shard binds its port only after restoring its slice, so an open port means ready.
    """
    spec = fed.spec
    mounts, volumes = server_volumes(fed, names.shard_pvc_name(fed.name, index), admin=False, peer=True)
    container: dict[str, Any] = {
        "name": "ps-shard",
        "image": fed.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": shard_args(fed, index),
        "ports": [{"name": "grpc", "containerPort": SHARD_PORT, "protocol": "TCP"}],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": k8s_dump(spec.resources),
        **server_probes({"tcpSocket": {"port": "grpc"}, "timeoutSeconds": 5}),
        "volumeMounts": mounts,
        "securityContext": read_only_container_security(),
    }
    meta = _meta(fed, names.ps_shard_name(fed.name, index), "ps-shard", index)
    return single_replica_deployment(
        fed, meta, shard_selector(fed, index), dict(meta["labels"]),
        config_hash=config_hash, container=container, volumes=volumes,
    )  # fmt: skip
