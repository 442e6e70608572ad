"""kopf handlers of `Federation` (cloud role): reconcile the PS's children, poll the PS into `.status`.

Thin: parsing and manifests come from `cloud_builders`, status from `federation_status`; this module
only reads and writes the API and the PS admin API.
"""

from __future__ import annotations

import logging
import secrets
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
    build_config_map,
    build_ps_deployment,
    build_pvc,
    build_service,
    build_tls_secret,
    config_hash,
    tls_names,
)
from geofed_operator.conditions import set_conditions
from geofed_operator.federation_status import (
    deployment_ready,
    federation_status_degraded,
    federation_status_from_ps,
    federation_status_not_ready,
)
from geofed_operator.handlers.deps import Deps, MissingSecret, read_secret_key, readable
from geofed_operator.kube import Kube
from geofed_operator.ps_admin import explain_admin_error
from geofed_operator.status_models import FederationStatus, status_patch
from geofed_operator.tls import certificate_names, issue_self_signed

RESOURCE = (names.GROUP, names.VERSION, names.FEDERATION_PLURAL)
RETRY_S = 30.0


@dataclass(frozen=True)
class TLSState:
    """The certificate the PS serves: its PEM (for the config hash), probe hints and a status note."""

    cert_pem: bytes | None
    served: ServedTLS
    note: str


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


def ensure_admin_secret(kube: Kube, fed: FederationObject, owner: Any) -> None:
    """Create the admin credential once; it is never rotated behind the PS's back."""
    secret = build_admin_secret(fed, secrets.token_urlsafe(32))
    kopf.adopt(secret, owner=owner)
    kube.ensure(secret)


def ensure_tls(kube: Kube, fed: FederationObject, owner: Any) -> TLSState:
    """Use the named TLS Secret, or generate (and re-issue on new names) a self-signed one."""
    if fed.tls_secret is None:
        return TLSState(None, ServedTLS(), "insecure: plaintext gRPC (spec.insecure); for local clusters only")
    if fed.spec.tls_secret_name:
        name = fed.spec.tls_secret_name
        cert = read_secret_key(kube, fed.namespace, name, "tls.crt")
        read_secret_key(kube, fed.namespace, name, "tls.key")
        has_ca = read_secret_key(kube, fed.namespace, name, "ca.crt", optional=True) is not None
        covered = certificate_names(cert or b"")
        local = "127.0.0.1" in covered or "localhost" in covered
        server_name = None if local or not covered else covered[0]
        return TLSState(cert, ServedTLS(has_ca, server_name), f"serving the certificate from Secret {name!r}")
    name = names.tls_secret_name(fed.name)
    wanted = tls_names(fed)
    existing = kube.get("v1", "Secret", fed.namespace, name)
    annotations = ((existing or {}).get("metadata") or {}).get("annotations") or {}
    if existing is None or annotations.get(names.ANNOTATION_TLS_NAMES) != ",".join(wanted):
        ca = read_secret_key(kube, fed.namespace, name, "ca.crt", optional=True)
        ca_key = read_secret_key(kube, fed.namespace, name, "ca.key", optional=True)
        material = issue_self_signed(wanted, validity_days=fed.spec.tls.validity_days, ca_pem=ca, ca_key_pem=ca_key)
        secret = build_tls_secret(fed, material)
        kopf.adopt(secret, owner=owner)
        kube.apply(secret)
        cert = material.cert_pem
    else:
        cert = read_secret_key(kube, fed.namespace, name, "tls.crt")
    note = (
        f"generated a self-signed certificate; sites must trust ca.crt from Secret {name!r} "
        "(geofed site enroll --ca); list external names in spec.tls.dnsNames or set spec.tlsSecretName"
    )
    return TLSState(cert, ServedTLS(), note)


def reconcile_federation(deps: Deps, body: Mapping[str, Any], patch: Any, logger: logging.Logger) -> None:
    """Create or update every child of a Federation and record what was rolled out."""
    try:
        fed = FederationObject.from_body(body, deps.settings.ps_image)
    except ValidationError as exc:
        _degrade(patch, body, "InvalidSpec", readable(exc), deps)
        raise kopf.PermanentError(readable(exc)) from None
    kube, owner = deps.kube, body
    try:
        ensure_admin_secret(kube, fed, owner)
        tls = ensure_tls(kube, fed, owner)
    except MissingSecret as exc:
        _degrade(patch, body, "TLSSecretMissing", str(exc), deps)
        raise kopf.TemporaryError(str(exc), delay=RETRY_S) from None
    digest = config_hash(fed, tls.cert_pem)
    children = [build_config_map(fed), build_service(fed), build_ps_deployment(fed, config_hash=digest, tls=tls.served)]
    kopf.adopt(children, owner=owner)
    pvc = build_pvc(fed)
    if not fed.spec.storage.retain_on_delete:
        kopf.adopt(pvc, owner=owner)
    kube.ensure(pvc)  # a PVC's spec is immutable once bound: create only
    for child in children:
        kube.apply(child)
    status = body.get("status") or {}
    rolled = status.get("configHash") != digest or not status.get("phase")
    generation = body["metadata"].get("generation")
    fields: dict[str, Any] = {"phase": "Progressing"} if rolled else {}
    update = status_patch(
        FederationStatus,
        observed_generation=generation,
        ps_address=fed.ps_address,
        admin_secret_name=names.admin_secret_name(fed.name),
        tls_secret_name=fed.tls_secret,
        tls_note=tls.note,
        config_hash=digest,
        conditions=set_conditions(
            status.get("conditions"),
            {"Progressing": (True, "RollingOut", "applied the PS configuration")} if rolled else {},
            now=deps.clock(),
            generation=generation,
        ),
        **fields,
    )
    _write(patch, body, update)
    logger.info("federation %s/%s reconciled (config %s)", fed.namespace, fed.name, digest)


def poll_federation(deps: Deps, body: Mapping[str, Any], patch: Any, logger: logging.Logger) -> None:
    """Read the PS's admin status into `.status` (or say why it cannot be read)."""
    try:
        fed = FederationObject.from_body(body, deps.settings.ps_image)
    except ValidationError:
        return  # the change handlers already reported it
    kube = deps.kube
    meta, status = body["metadata"], body.get("status") or {}
    common = {"now": deps.clock(), "generation": meta.get("generation"), "conditions": status.get("conditions")}
    ready, why = deployment_ready(kube.get("apps/v1", "Deployment", fed.namespace, names.ps_name(fed.name)))
    if not ready:
        _write(patch, body, federation_status_not_ready(why, **common))
        return
    try:
        credential = read_secret_key(kube, fed.namespace, names.admin_secret_name(fed.name), ADMIN_KEY)
        ca = None
        if fed.tls_secret is not None:
            ca = read_secret_key(kube, fed.namespace, fed.tls_secret, "ca.crt", optional=True)
    except MissingSecret as exc:
        _write(patch, body, federation_status_degraded("SecretMissing", str(exc), **common))
        return
    address = deps.settings.ps_address_override or fed.ps_address
    server_name = fed.service_host if deps.settings.ps_address_override and fed.tls_secret else None
    try:
        with deps.admin_factory(
            address,
            (credential or b"").decode().strip(),
            insecure=fed.tls_secret is None,
            ca_cert=ca,
            timeout_s=deps.settings.admin_timeout_s,
            server_name=server_name,
        ) as admin:
            ps_status = admin.status()
    except Exception as exc:  # AdminError, or a TLS/channel error: all end up as a readable condition
        reason, message = explain_admin_error(exc, address, "read the status")
        logger.warning("%s", message)
        _write(patch, body, federation_status_degraded(reason, message, **common))
        return
    _write(patch, body, federation_status_from_ps(ps_status, **common))


def register(registry: kopf.OperatorRegistry, deps: Deps) -> None:
    """Attach the Federation handlers to `registry`."""

    @kopf.on.resume(*RESOURCE, registry=registry)
    @kopf.on.create(*RESOURCE, registry=registry)
    @kopf.on.update(*RESOURCE, registry=registry)
    def reconcile(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
        reconcile_federation(deps, body, patch, logger)

    @kopf.timer(*RESOURCE, interval=deps.settings.status_interval_s, registry=registry)
    def poll(body: kopf.Body, patch: kopf.Patch, logger: logging.Logger, **_: Any) -> None:
        poll_federation(deps, body, patch, logger)
