"""The two CustomResourceDefinitions, generated from the spec and status models.

Structural schemas (every node typed, no `$ref`), CEL transition rules for immutable fields, the
status subresource, short names, a `geofed` category and the printer columns `kubectl get` shows.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from geofed_operator import names
from geofed_operator.federation_spec import FederationSpec
from geofed_operator.openapi import model_schema
from geofed_operator.siteclient_spec import SiteClientSpec
from geofed_operator.status_models import FederationStatus, SiteClientStatus

READY = {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}
REASON = {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'}
FEDERATION_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    READY,
    REASON,
    {"name": "Version", "type": "integer", "jsonPath": ".status.version"},
    {"name": "Clients", "type": "integer", "jsonPath": ".status.connectedClients"},
    {"name": "Groups", "type": "string", "jsonPath": ".status.groupVersions"},
    {"name": "Loss", "type": "number", "jsonPath": ".status.trainLoss"},
    {"name": "Eval", "type": "number", "jsonPath": ".status.evalLoss", "priority": 1},
    {"name": "Mode", "type": "string", "jsonPath": ".spec.aggregation.mode", "priority": 1},
    {"name": "Address", "type": "string", "jsonPath": ".status.publicAddress", "priority": 1},
    {"name": "Shards", "type": "string", "jsonPath": ".status.shardsUp", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]
SITECLIENT_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    READY,
    REASON,
    {"name": "Federation", "type": "string", "jsonPath": ".spec.federation"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Last Sync", "type": "date", "jsonPath": ".status.lastSyncTime"},
    {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt", "priority": 1},
    {"name": "Site", "type": "string", "jsonPath": ".spec.site", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


DESCRIPTIONS = {
    names.FEDERATION_KIND: "A federation's cloud side: the parameter server that holds the global model, "
    "its Service, checkpoint volume, admin credential and TLS certificate (paper §III-A).",
    names.SITECLIENT_KIND: "One institution's training client for a federation, run as a Job per launch "
    "attempt and relaunched with a fresh one-time token after preemption (paper §III-B4).",
}


# Names the API server would accept for the object but not for the children named after it.
NAME_RULES = {
    names.FEDERATION_KIND: {
        "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "message": "a Federation's name must start with a letter and hold only a-z, 0-9 and '-' "
        "(it names the PS Service, a DNS-1035 label)",
    },
    names.SITECLIENT_KIND: {
        "rule": "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "message": "a SiteClient's name must hold only a-z, 0-9 and '-' (it names Jobs, pods and the client id)",
    },
}


# Names go into label values of the children (app.kubernetes.io/instance, geofed.io/federation, ...).
LABEL_NAME_RULE = {
    "rule": f"size(self.metadata.name) <= {names.MAX_LABEL_VALUE}",
    "message": f"the name must be at most {names.MAX_LABEL_VALUE} characters: it is a label value of its children",
}


def _version_schema(spec: type[BaseModel], status: type[BaseModel], kind: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": DESCRIPTIONS[kind],
        "x-kubernetes-validations": [NAME_RULES[kind], LABEL_NAME_RULE],
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(spec),
            "status": model_schema(status),
        },
    }


def _crd(
    kind: str,
    plural: str,
    short: list[str],
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[Any],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{names.GROUP}",
            "labels": {names.LABEL_PART_OF: "geofed"},
        },
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["geofed"],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": _version_schema(spec, status, kind)},
                }
            ],
        },
    }


def federation_crd() -> dict[str, Any]:
    """CRD of `Federation` (cloud side: the PS and everything around it)."""
    return _crd(
        names.FEDERATION_KIND,
        names.FEDERATION_PLURAL,
        ["fed"],
        FederationSpec,
        FederationStatus,
        FEDERATION_COLUMNS,
    )


def siteclient_crd() -> dict[str, Any]:
    """CRD of `SiteClient` (institution side: one client Job per launch attempt)."""
    return _crd(
        names.SITECLIENT_KIND,
        names.SITECLIENT_PLURAL,
        ["sitec"],
        SiteClientSpec,
        SiteClientStatus,
        SITECLIENT_COLUMNS,
    )


def peering_crd(kind: str, scope: str) -> dict[str, Any]:
    """kopf's own peering kind (kopf.dev/v1): replicas of the operator find each other through one object."""
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                        }
                    },
                }
            ],
        },
    }


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD document, as written to `crds/`."""
    return {
        f"{names.GROUP}_{names.FEDERATION_PLURAL}.yaml": federation_crd(),
        f"{names.GROUP}_{names.SITECLIENT_PLURAL}.yaml": siteclient_crd(),
    }


def peering_crds() -> dict[str, dict[str, Any]]:
    """File name -> kopf's peering CRDs (for `replicas` > 1), shipped with ours."""
    return {
        "kopf.dev_clusterkopfpeerings.yaml": peering_crd("ClusterKopfPeering", "Cluster"),
        "kopf.dev_kopfpeerings.yaml": peering_crd("KopfPeering", "Namespaced"),
    }
