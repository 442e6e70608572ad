"""kopf handlers of `Federation` (cloud role): reconcile the PS's children, poll the PS into `.status`.

Thin: parsing and manifests come from `cloud_builders`, status from `federation_status`; this module
only reads and writes the API and the PS admin API.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import logging
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from pydantic import ValidationError

from geofed_operator import names
from geofed_operator.cloud_builders import (
    ADMIN_KEY,
    FederationObject,
    ServedTLS,
    build_admin_secret,
    build_ca_secret,
    build_config_map,
    build_metrics_service,
    build_pdb,
    build_peer_secret,
    build_ps_deployment,
    build_pvc,
    build_service,
    build_tls_secret,
    config_hash,
    tls_names,
)
from geofed_operator.conditions import set_conditions
from geofed_operator.events import post_event
from geofed_operator.federation_status import (
    deployment_ready,
    federation_status_degraded,
    federation_status_from_groups,
    federation_status_from_ps,
    federation_status_not_ready,
)
from geofed_operator.handlers.deps import Deps, MissingSecret, read_secret_key, readable
from geofed_operator.handlers.finalizers import release_finalizer
from geofed_operator.kube import Kube, KubeError
from geofed_operator.ownership import ForeignObject, apply_owned, ensure_owned
from geofed_operator.pod_problems import workload_problem
from geofed_operator.ps_admin import explain_admin_failure
from geofed_operator.quantity import parse_quantity
from geofed_operator.shard_builders import build_shard_deployment, build_shard_pdb, build_shard_pvc, build_shard_service
from geofed_operator.shard_status import federation_status_from_shards
from geofed_operator.status_models import FederationStatus, status_patch
from geofed_operator.tls import TLSMaterial, certificate_names, issue_self_signed, renewal_due
from geofed_operator.trainer_builders import build_trainer_deployment, build_trainer_pvc, build_trainer_service

RESOURCE = (names.GROUP, names.VERSION, names.FEDERATION_PLURAL)
RETRY_S = 30.0


@dataclass(frozen=True)
class TLSState:
    """The certificate the PS serves: its PEM (for the config hash), probe hints and a status note."""

    cert_pem: bytes | None
    served: ServedTLS
    note: str
    issued: str | None = None  # the Event reason when this pass (re-)issued the generated certificate


def _write(patch: Any, body: Mapping[str, Any], update: Mapping[str, Any]) -> None:
    """Patch only what differs from the current status (no write, no event, when steady)."""
    current = body.get("status") or {}
    for key, value in update.items():
        if current.get(key) != value:
            patch.status[key] = value


def _degrade(patch: Any, body: Mapping[str, Any], reason: str, message: str, deps: Deps) -> None:
    _write(
        patch,
        body,
        federation_status_degraded(
            reason,
            message,
            now=deps.clock(),
            generation=body["metadata"].get("generation"),
            conditions=(body.get("status") or {}).get("conditions"),
        ),
    )


def _ensure_generated(kube: Kube, secret: dict[str, Any], owner: Any) -> bytes:
    """Create a generated Secret unless it exists; the value it holds (created now or kept from before)."""
    kopf.adopt(secret, owner=owner)
    live, _ = _ensure(kube, secret)
    return b"".join(base64.b64decode(v) for _, v in sorted((live.get("data") or {}).items()))


def ensure_admin_secret(kube: Kube, fed: FederationObject, owner: Any) -> bytes:
    """Create the admin credential once; the credential it holds.

    The PS reads it when it starts: the credential goes into the config hash, so one regenerated
    after the Secret was deleted rolls the PS and the Secret and the PS never disagree.
    """
    return _ensure_generated(kube, build_admin_secret(fed, secrets.token_urlsafe(32)), owner)


def ensure_peer_secret(kube: Kube, fed: FederationObject, owner: Any) -> bytes:
    """Create the PSs' (and split trainer's) shared peer secret once; the secret it holds (in the config hash)."""
    return _ensure_generated(kube, build_peer_secret(fed, secrets.token_urlsafe(32)), owner)


def _data(secret: Mapping[str, Any] | None, key: str) -> bytes | None:
    value = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(value) if value else None


def public_hosts(service: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The load balancer's hostnames and IPs, as the cloud reported them in the Service's status."""
    ingress = (((service or {}).get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return tuple(h for entry in ingress for h in (entry.get("hostname"), entry.get("ip")) if h)


def public_address(fed: FederationObject, service: Mapping[str, Any] | None) -> str | None:
    """host:port sites dial: the load balancer's, or `<node>:<nodePort>` for NodePort; None in-cluster only."""
    hosts = public_hosts(service)
    if fed.spec.service.type == "LoadBalancer" and hosts:
        return f"{hosts[0]}:{fed.spec.service.port}"
    if fed.spec.service.type == "NodePort":
        ports = ((service or {}).get("spec") or {}).get("ports") or []
        node_port = next((p.get("nodePort") for p in ports if p.get("name") == "grpc" and p.get("nodePort")), None)
        return f"<node-address>:{node_port}" if node_port else None
    return None


def ensure_tls(kube: Kube, fed: FederationObject, owner: Any, hosts: tuple[str, ...], now: dt.datetime) -> TLSState:
    """Use the named TLS Secret, or generate one (re-issued for new names and before it expires)."""
    if fed.tls_secret is None:
        return TLSState(None, ServedTLS(), "insecure: plaintext gRPC (spec.insecure); for local clusters only")
    if fed.spec.tls_secret_name:  # read on every pass: a renewed certificate (cert-manager) rolls the PS
        name = fed.spec.tls_secret_name
        cert = read_secret_key(kube, fed.namespace, name, "tls.crt")
        read_secret_key(kube, fed.namespace, name, "tls.key")
        has_ca = read_secret_key(kube, fed.namespace, name, "ca.crt", optional=True) is not None
        covered = certificate_names(cert or b"")
        local = "127.0.0.1" in covered or "localhost" in covered
        server_name = None if local or not covered else covered[0]
        return TLSState(cert, ServedTLS(has_ca, server_name), f"serving the certificate from Secret {name!r}")
    name, ca_name = names.tls_secret_name(fed.name), names.ca_secret_name(fed.name)
    wanted = tls_names(fed, hosts)
    existing = kube.get("v1", "Secret", fed.namespace, name)
    ca_secret = kube.get("v1", "Secret", fed.namespace, ca_name)
    # Before 0.2 the CA key sat in the TLS Secret that sites read ca.crt from: move it out.
    legacy = _data(existing, "ca.key") is not None
    if existing is not None and not legacy and _data(ca_secret, "ca.key") is None:
        raise CAMissing(
            f"Secret {ca_name!r} (the private CA that signed the certificate in Secret {name!r}, whose ca.crt the "
            f"sites trust) is missing or has no ca.key: the PS keeps serving its current certificate, which cannot "
            f"be renewed or re-issued meanwhile. Restore Secret {ca_name!r} from a backup; or delete Secret {name!r} "
            "as well to generate a new CA, after which every site must be enrolled again with the new ca.crt"
        )
    ca_source = ca_secret if _data(ca_secret, "ca.key") else existing
    ca, ca_key = _data(ca_source, "ca.crt"), _data(ca_source, "ca.key")
    cert = _data(existing, "tls.crt")
    annotations = ((existing or {}).get("metadata") or {}).get("annotations") or {}
    issued = None
    if cert is None:
        issued = "CertificateIssued"
    elif annotations.get(names.ANNOTATION_TLS_NAMES) != ",".join(wanted):
        issued = "CertificateReissued"
    elif renewal_due(cert, now=now):
        issued = "CertificateRenewed"
    if issued or legacy:
        if issued:
            material = issue_self_signed(
                wanted, validity_days=fed.spec.tls.validity_days, ca_pem=ca, ca_key_pem=ca_key, now=now
            )
        else:
            material = TLSMaterial(cert or b"", _data(existing, "tls.key") or b"", ca or b"", ca_key or b"")
        ca_secret = build_ca_secret(fed, material)
        kopf.adopt(ca_secret, owner=owner)
        kube.apply(ca_secret)  # restored from a backup by hand, as CASecretMissing asks: taken over as it is
        tls_secret = build_tls_secret(fed, material, wanted)
        kopf.adopt(tls_secret, owner=owner)
        apply_owned(kube, tls_secret)
        if legacy:  # apply keeps keys it did not set on simpler servers: drop it
            kube.patch("v1", "Secret", fed.namespace, name, {"data": {"ca.key": None}})
        cert = material.cert_pem
    note = (
        f"generated a self-signed certificate (renewed automatically); sites must trust ca.crt from Secret "
        f"{name!r} (geofed site enroll --ca); it covers the Service names, spec.tls.dnsNames/ipAddresses and the "
        "load balancer's address"
    )
    return TLSState(cert, ServedTLS(), note, issued)


class CAMissing(Exception):
    """The generated certificate's private CA is gone while the certificate it signed is still served."""


class ChildRejected(Exception):
    """The API server refused to create or change a child (quota, admission, invalid name...)."""

    def __init__(self, kind: str, name: str, exc: KubeError) -> None:
        super().__init__(f"the API server refused {kind} {name!r}: {exc.status} {exc.reason}: {exc.message}")


def _apply(kube: Kube, obj: dict[str, Any], *, create_only: bool = False) -> dict[str, Any]:
    return _ensure(kube, obj)[0] if create_only else _refused_as_child(functools.partial(apply_owned, kube), obj)


def _ensure(kube: Kube, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    return _refused_as_child(functools.partial(ensure_owned, kube), obj)


def _refused_as_child(call: Any, obj: dict[str, Any]) -> Any:
    try:
        return call(obj)
    except KubeError as exc:
        raise ChildRejected(obj["kind"], obj["metadata"]["name"], exc) from None


class StorageMismatch(Exception):
    """The checkpoint PVC cannot become what the spec asks (shrinking, another StorageClass)."""


def reconcile_pvc(
    kube: Kube,
    fed: FederationObject,
    owner: Mapping[str, Any],
    *,
    may_adopt: bool,
    group: str | None = None,
    pvc: dict[str, Any] | None = None,
) -> None:
    """Create the checkpoint PVC; keep its ownership in line with retainOnDelete; grow it on request.

    Only a change handler (`may_adopt`, fresh spec) re-adopts an existing PVC: a timer pass that started
    before `retainOnDelete: true` must never hand the global model back to the garbage collector.
    `pvc` is another claim of the same storage spec (a PS shard's); the group's PS's when None.
    """
    pvc = pvc or build_pvc(fed, group)
    if not fed.spec.storage.retain_on_delete:
        kopf.adopt(pvc, owner=owner)
    live = _apply(kube, pvc, create_only=True)  # a bound PVC's spec is immutable except its size
    name = pvc["metadata"]["name"]
    uid = owner["metadata"].get("uid")
    refs = (live.get("metadata") or {}).get("ownerReferences") or []
    ours = [r for r in refs if r.get("uid") == uid]
    wanted = [] if fed.spec.storage.retain_on_delete else pvc["metadata"].get("ownerReferences", [])
    if [r.get("uid") for r in ours] != [r.get("uid") for r in wanted] and (may_adopt or not wanted):
        others = [r for r in refs if r.get("uid") != uid]
        try:
            kube.patch(
                "v1", "PersistentVolumeClaim", fed.namespace, name, {"metadata": {"ownerReferences": others + wanted}}
            )
        except KubeError as exc:
            raise ChildRejected("PersistentVolumeClaim", name, exc) from None
    live_spec = live.get("spec") or {}
    want_class = fed.spec.storage.storage_class_name
    if want_class is not None and live_spec.get("storageClassName") not in (None, want_class):
        raise StorageMismatch(
            f"PVC {name!r} uses StorageClass {live_spec.get('storageClassName')!r}, not {want_class!r}: a PVC cannot "
            "change class; move the checkpoints to a new Federation"
        )
    have = parse_quantity((live_spec.get("resources") or {}).get("requests", {}).get("storage", "0"))
    want = parse_quantity(fed.spec.storage.size)
    if want < have:
        raise StorageMismatch(f"PVC {name!r} holds {have} bytes; storage.size {fed.spec.storage.size} would shrink it")
    if want > have:  # needs a StorageClass with allowVolumeExpansion; a refusal is reported as is
        resize = {"spec": {"resources": {"requests": {"storage": str(fed.spec.storage.size)}}}}
        try:
            kube.patch("v1", "PersistentVolumeClaim", fed.namespace, name, resize)
        except KubeError as exc:
            raise ChildRejected("PersistentVolumeClaim", name, exc) from None


def reconcile_children(
    deps: Deps, fed: FederationObject, body: Mapping[str, Any], *, on_change: bool
) -> tuple[TLSState, str, str | None]:
    """Create or update every child (re-creating deleted ones); (TLS state, config hash, public address)."""
    kube, owner = deps.kube, body
    generated = [ensure_admin_secret(kube, fed, owner)]
    if fed.spec.groups or fed.split_learning or fed.shards:
        generated.append(ensure_peer_secret(kube, fed, owner))
    services = [kube.get("v1", "Service", fed.namespace, names.ps_name(fed.name, g)) for g in fed.groups]
    if fed.split_learning:
        services.append(kube.get("v1", "Service", fed.namespace, names.trainer_name(fed.name)))
    hosts = tuple(h for service in services for h in public_hosts(service))
    tls = ensure_tls(kube, fed, owner, tuple(dict.fromkeys(hosts)), deps.clock())
    digest = config_hash(fed, tls.cert_pem, generated)
    # Claims before the Deployments: a pod whose claim does not exist yet is unschedulable meanwhile.
    for group in fed.groups:
        reconcile_pvc(kube, fed, owner, may_adopt=on_change, group=group)
    for index in fed.shards:
        reconcile_pvc(kube, fed, owner, may_adopt=on_change, pvc=build_shard_pvc(fed, index))
    if fed.split_learning:
        trainer_pvc = build_trainer_pvc(fed)
        if not fed.spec.storage.retain_on_delete:
            kopf.adopt(trainer_pvc, owner=owner)
        _apply(kube, trainer_pvc, create_only=True)
    children = [build_config_map(fed)]
    for group in fed.groups:  # one PS per group; (None,) for the single PS
        children += [
            build_service(fed, group),
            build_metrics_service(fed, group),
            build_ps_deployment(fed, config_hash=digest, tls=tls.served, group=group),
        ]
        if fed.spec.pod_disruption_budget:
            children.append(build_pdb(fed, group))
        else:
            kube.delete("policy/v1", "PodDisruptionBudget", fed.namespace, names.ps_name(fed.name, group))
    for index in fed.shards:  # a sharded PS: the PS above is the front, these hold the model
        children += [build_shard_service(fed, index), build_shard_deployment(fed, index, config_hash=digest)]
        if fed.spec.pod_disruption_budget:
            children.append(build_shard_pdb(fed, index))
        else:
            kube.delete("policy/v1", "PodDisruptionBudget", fed.namespace, names.ps_shard_name(fed.name, index))
    if fed.split_learning:
        children += [build_trainer_service(fed), build_trainer_deployment(fed, config_hash=digest, tls=tls.served)]
    kopf.adopt(children, owner=owner)
    for child in children:
        _apply(kube, child)
    return tls, digest, public_address(fed, services[0])


def reconcile_federation(
    deps: Deps, body: Mapping[str, Any], patch: Any, logger: logging.Logger, *, on_change: bool = True
) -> bool:
    """Bring the children in line with the spec and record what was rolled out; False if it could not."""
    try:
        fed = FederationObject.from_body(body, deps.settings.ps_image, deps.settings.client_image)
    except ValidationError as exc:
        _degrade(patch, body, "InvalidSpec", readable(exc), deps)
        if on_change:
            raise kopf.PermanentError(readable(exc)) from None
        return False
    now = deps.clock()
    try:
        tls, digest, address = reconcile_children(deps, fed, body, on_change=on_change)
    except (MissingSecret, CAMissing, ChildRejected, StorageMismatch, ForeignObject, KubeError) as exc:
        reason = {
            MissingSecret: "TLSSecretMissing",
            CAMissing: "CASecretMissing",
            ChildRejected: "ChildRejected",
            StorageMismatch: "StorageMismatch",
            ForeignObject: "ForeignObject",
        }
        why = reason.get(type(exc), "APIError")
        if (body.get("status") or {}).get("phase") != "Degraded":
            post_event(deps.kube, body, "Warning", why, str(exc), now)
        _degrade(patch, body, why, str(exc), deps)
        logger.warning("federation %s/%s: %s", fed.namespace, fed.name, exc)
        if on_change:
            raise kopf.TemporaryError(str(exc), delay=RETRY_S) from None
        return False
    status = body.get("status") or {}
    rolled = status.get("configHash") != digest or not status.get("phase")
    if tls.issued:
        post_event(deps.kube, body, "Normal", tls.issued, f"server certificate for {fed.service_host}", now)
    if rolled:
        post_event(deps.kube, body, "Normal", "RollingOut", f"PS configuration {digest} applied", now)
    generation = body["metadata"].get("generation")
    fields: dict[str, Any] = {"phase": "Progressing"} if rolled else {}
    update = status_patch(
        FederationStatus,
        observed_generation=generation,
        ps_address=fed.ps_address,
        public_address=address,
        admin_secret_name=names.admin_secret_name(fed.name),
        tls_secret_name=fed.tls_secret,
        tls_note=tls.note,
        config_hash=digest,
        conditions=set_conditions(
            status.get("conditions"),
            {"Progressing": (True, "RollingOut", "applied the PS configuration")} if rolled else {},
            now=now,
            generation=generation,
        ),
        **fields,
    )
    _write(patch, body, update)
    logger.info("federation %s/%s reconciled (config %s)", fed.namespace, fed.name, digest)
    return True


def ps_pod_problem(
    kube: Kube, namespace: str, deployment: Mapping[str, Any] | None, claim_name: str
) -> tuple[str, str] | None:
    """What keeps the pod of a PS (or shard) Deployment that is not ready from running, as a SiteClient reads its
    Job's pod: a refused pod, a pending checkpoint claim, a pull, scheduling or crash-loop problem; None while it
    just starts."""
    if deployment is None:
        return None
    selector = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    pods = kube.list("v1", "Pod", namespace, selector) if selector else []
    claim = kube.get("v1", "PersistentVolumeClaim", namespace, claim_name)
    return workload_problem(deployment, pods, [claim])


def poll_federation(deps: Deps, body: Mapping[str, Any], patch: Any, logger: logging.Logger) -> None:
    """Read each PS's admin status into `.status` (or say why it cannot be read)."""
    try:
        fed = FederationObject.from_body(body, deps.settings.ps_image)
    except ValidationError:
        return  # the change handlers already reported it
    kube = deps.kube
    meta, status = body["metadata"], body.get("status") or {}
    common = {"now": deps.clock(), "generation": meta.get("generation"), "conditions": status.get("conditions")}
    for group in fed.groups:
        deployment = kube.get("apps/v1", "Deployment", fed.namespace, names.ps_name(fed.name, group))
        ready, why = deployment_ready(deployment)
        if not ready:
            problem = ps_pod_problem(kube, fed.namespace, deployment, names.pvc_name(fed.name, group))
            if problem is not None:
                reason, message = problem
                message = f"group {group}: {message}" if group else message
                _write(patch, body, federation_status_degraded(reason, message, **common))
            else:
                _write(patch, body, federation_status_not_ready(f"group {group}: {why}" if group else why, **common))
            return
    # Ready also needs every shard's pod (a push waits for all of them); the front is read all the same, so
    # a shard it cannot reach shows as ShardDown even while its pod restarts.
    rolling: list[str] = []
    for index in fed.shards:
        deployment = kube.get("apps/v1", "Deployment", fed.namespace, names.ps_shard_name(fed.name, index))
        ready, why = deployment_ready(deployment)
        if not ready:
            problem = ps_pod_problem(kube, fed.namespace, deployment, names.shard_pvc_name(fed.name, index))
            if problem is not None:
                _write(patch, body, federation_status_degraded(problem[0], f"PS shard {index}: {problem[1]}", **common))
                return
            rolling.append(f"PS shard {index}: {why}")
    try:
        credential = read_secret_key(kube, fed.namespace, names.admin_secret_name(fed.name), ADMIN_KEY)
        ca = None
        if fed.tls_secret is not None:
            ca = read_secret_key(kube, fed.namespace, fed.tls_secret, "ca.crt", optional=True)
    except MissingSecret as exc:
        _write(patch, body, federation_status_degraded("SecretMissing", str(exc), **common))
        return
    observed: list[tuple[str, str, dict[str, Any], str | None]] = []
    clients: list[dict[str, Any]] = []
    for group in fed.groups:
        address = deps.settings.ps_address_override or fed.group_address(group)
        server_name = fed.group_host(group) if deps.settings.ps_address_override and fed.tls_secret else None
        try:
            with deps.admin_factory(
                address,
                (credential or b"").decode().strip(),
                insecure=fed.tls_secret is None,
                ca_cert=ca,
                timeout_s=deps.settings.admin_timeout_s,
                server_name=server_name,
            ) as admin:
                clients += admin.list_clients()  # before status: the per-site contributions in status.sites
                ps_status = admin.status()
        except Exception as exc:  # AdminError, or a TLS/channel error: all end up as a readable condition
            reason, message = explain_admin_failure(
                exc, address, "read the status", ca_cert=ca, server_name=server_name, insecure=fed.tls_secret is None
            )
            message = f"group {group}: {message}" if group else message
            logger.warning("%s", message)
            _write(patch, body, federation_status_degraded(reason, message, **common))
            return
        service = kube.get("v1", "Service", fed.namespace, names.ps_name(fed.name, group)) if group else None
        observed.append((group or "", fed.group_address(group), ps_status, public_address(fed, service)))
    if fed.spec.groups:
        _write(patch, body, federation_status_from_groups(observed, clients=clients, **common))
    elif fed.shards:
        front = observed[0][2]
        _write(patch, body, federation_status_from_shards(front, len(fed.shards), rolling, clients=clients, **common))
    else:
        _write(patch, body, federation_status_from_ps(observed[0][2], clients=clients, **common))


def register(registry: kopf.OperatorRegistry, deps: Deps) -> None:
    """Attach the Federation handlers to `registry`."""

    # kopf runs the timer next to the change handlers, in other threads: without a lock, a timer pass that read the
    # old spec could re-apply the old ConfigMap and Deployment just after an update applied the new ones,
    # rolling the PS back and forth. The timer's body is live, so under the lock it reads the newest spec.
    locks: dict[str, threading.Lock] = {}  # one small lock per Federation uid the operator has seen
    guard = threading.Lock()

    def lock_of(body: kopf.Body) -> threading.Lock:
        with guard:
            return locks.setdefault(body["metadata"]["uid"], threading.Lock())

    @kopf.on.resume(*RESOURCE, registry=registry)
    @kopf.on.create(*RESOURCE, registry=registry)
    @kopf.on.update(*RESOURCE, registry=registry)
    def reconcile(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
        with lock_of(body):
            reconcile_federation(deps, body, patch, logger)

    # The status timer needs no finalizer (see handlers/finalizers.py): deleting a Federation never waits
    # for the operator. kopf stops timers only on a deletionTimestamp, which an object without finalizers
    # never shows, so a deleted Federation's timer keeps being called: the DELETED event marks its uid,
    # and every later call returns at once (no child is re-created, nothing is written).
    gone: set[str] = set()

    @kopf.on.event(*RESOURCE, registry=registry)
    def forget(event: Mapping[str, Any], **_: Any) -> None:
        if event.get("type") == "DELETED":
            uid = ((event.get("object") or {}).get("metadata") or {}).get("uid")
            with guard:
                gone.add(uid)
                locks.pop(uid, None)

    @kopf.timer(*RESOURCE, interval=deps.settings.status_interval_s, registry=registry)
    def poll(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
        # Level-triggered: re-create deleted children, roll a renewed certificate, then read the PS.
        uid = body["metadata"]["uid"]
        if uid in gone:
            return
        with lock_of(body):
            if uid not in gone and reconcile_federation(deps, body, patch, logger, on_change=False):
                poll_federation(deps, body, patch, logger)

    release_finalizer(registry, poll)  # a Federation never waits for the operator to be deleted
