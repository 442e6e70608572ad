"""Site enrollment: the Secret + SiteClient YAML an institution applies (the `site.yaml` of the docs).

`geofed site enroll` mints a site credential (stored hashed by the PS, revocable) and renders these
manifests; the rendering is pure so it is tested without a PS. The manifests name no namespace unless
asked to (the site applies them with `kubectl apply -n <namespace>`), and only the CA certificate of
the PS goes in the Secret, never a key.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from geofed_operator import names
from geofed_operator.keys import k8s_dump
from geofed_operator.siteclient_spec import SiteClientSpec

CREDENTIAL_KEY = "credential"
CA_KEY = "ca.crt"


def credential_secret_name(site: str) -> str:
    """The Secret holding a site's credential (and the PS's CA)."""
    return names.child_name(site, "geofed-credential", limit=253)


def _metadata(name: str, namespace: str | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    return meta


def client_id_of(docs: list[dict[str, Any]]) -> str:
    """The client id the SiteClient in `docs` joins with (what a Federation's masterClientID names)."""
    sc = next(d for d in docs if d["kind"] == names.SITECLIENT_KIND)
    return names.client_id(sc["spec"]["site"], sc["metadata"]["name"])


def build_site_manifests(
    *,
    site: str,
    federation: str,
    ps_address: str,
    credential: str,
    ca_pem: bytes | None = None,
    insecure: bool = False,
    namespace: str | None = None,
    name: str | None = None,
    data_pvc: str = "geofed-data",
    work_pvc: str | None = None,
    gpus_per_pod: int = 1,
    master: bool = False,
    group: str | None = None,
    image_pull_secrets: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """[Secret, SiteClient] for one site; the spec is validated like the operator will validate it."""
    if insecure and ca_pem:
        raise ValueError("--ca and --insecure exclude each other")
    secret_name = credential_secret_name(site)
    data = {CREDENTIAL_KEY: base64.b64encode(credential.encode()).decode()}
    if ca_pem:
        data[CA_KEY] = base64.b64encode(ca_pem).decode()
    spec_fields: dict[str, Any] = {
        "federation": federation,
        "site": site,
        "ps_address": ps_address,
        "credential_secret_ref": {"name": secret_name, "key": CREDENTIAL_KEY},
        "gpus_per_pod": gpus_per_pod,
        "data": {"pvc": {"claim_name": data_pvc}},
    }
    if work_pvc:
        spec_fields["work_pvc"] = work_pvc
    if ca_pem:
        spec_fields["ca_secret_ref"] = {"name": secret_name, "key": CA_KEY}
    if insecure:
        spec_fields["insecure"] = True
    if master:
        spec_fields["master"] = True
    if group:
        spec_fields["group"] = group
    if image_pull_secrets:
        spec_fields["image_pull_secrets"] = [{"name": n} for n in image_pull_secrets]
    spec = SiteClientSpec.model_validate(spec_fields)  # raises with the field name if anything is off
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(secret_name, namespace, {names.LABEL_PART_OF: "geofed", "geofed.io/site": site}),
        "type": "Opaque",
        "data": data,
    }
    siteclient = {
        "apiVersion": names.API_VERSION,
        "kind": names.SITECLIENT_KIND,
        "metadata": _metadata(name or names.child_name(site, "client", limit=63), namespace),
        "spec": k8s_dump(spec, exclude_none=True, exclude_unset=True),
    }
    return [secret, siteclient]


def render(docs: list[dict[str, Any]], header: str = "") -> str:
    """Multi-document YAML, with an optional comment header."""
    body = yaml.safe_dump_all(docs, sort_keys=False)
    return header + body
