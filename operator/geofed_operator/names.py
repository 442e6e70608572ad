"""API names, labels and child-object names shared by the CRDs, the builders and the handlers."""

from __future__ import annotations

import hashlib

GROUP = "geofed.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

FEDERATION_KIND = "Federation"
FEDERATION_PLURAL = "federations"
SITECLIENT_KIND = "SiteClient"
SITECLIENT_PLURAL = "siteclients"

# Recommended labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/).
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "geofed-operator"

PS_APP = "geofed-ps"
PS_SHARD_APP = "geofed-ps-shard"  # not PS_APP: the front's public Service must never pick a shard pod
TRAINER_APP = "geofed-split-trainer"
CLIENT_APP = "geofed-client"

# Our own labels and annotations.
LABEL_FEDERATION = f"{GROUP}/federation"
LABEL_SITECLIENT = f"{GROUP}/siteclient"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_PS_GROUP = f"{GROUP}/ps-group"
LABEL_PS_SHARD = f"{GROUP}/ps-shard"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"  # the LocalQueue Kueue admits a Job from
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"
ANNOTATION_TLS_NAMES = f"{GROUP}/tls-names"
ANNOTATION_TOKEN_EXPIRES = f"{GROUP}/token-expires-at"
# On a client Job: why its pod was taken away (a DisruptionTarget seen before the pod object was removed).
ANNOTATION_DISRUPTION = f"{GROUP}/disruption"
# Where kopf keeps its handler progress (annotations only: the status schema stays ours).
KOPF_PREFIX = f"operator.{GROUP}"

# Longest label value the API server accepts: object names used as label values must fit.
MAX_LABEL_VALUE = 63
# Longest object name whose derived names (a Job's pods add "-xxxxx") stay valid DNS labels.
_MAX_NAME = 52


def too_long_for_labels(kind: str, name: str) -> str | None:
    """Why `name` cannot be an object of `kind` whose name goes into label values, or None if it can."""
    if len(name) <= MAX_LABEL_VALUE:
        return None
    return (
        f"{kind} name {name[:20]}... is {len(name)} characters; at most {MAX_LABEL_VALUE} fit in the labels "
        f"of its children (a label value's limit): use a shorter name"
    )


def child_name(owner: str, suffix: str, *, limit: int = _MAX_NAME) -> str:
    """`<owner>-<suffix>`, shortened with a stable hash when it would exceed `limit` characters."""
    name = f"{owner}-{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(owner.encode()).hexdigest()[:6]
    keep = limit - len(suffix) - len(digest) - 2
    return f"{owner[:keep].rstrip('-')}-{digest}-{suffix}"


def ps_name(federation: str, group: str | None = None) -> str:
    """The PS Deployment and Service share this name (`<federation>-ps-<group>` per PS group)."""
    return child_name(federation, f"ps-{group}" if group else "ps")


def admin_secret_name(federation: str) -> str:
    """Secret holding the PS admin credential (key `credential`)."""
    return child_name(federation, "admin")


def tls_secret_name(federation: str) -> str:
    """Secret holding the generated self-signed TLS material."""
    return child_name(federation, "tls")


def ca_secret_name(federation: str) -> str:
    """Secret holding the generated private CA (ca.crt and ca.key), never mounted anywhere."""
    return child_name(federation, "ca")


def metrics_service_name(federation: str, group: str | None = None) -> str:
    """ClusterIP Service of the PS metrics port (never exposed with the public gRPC Service)."""
    return child_name(federation, f"ps-{group}-metrics" if group else "ps-metrics")


def config_map_name(federation: str) -> str:
    """ConfigMap holding `federation.yaml`, the PS's copy of the federation settings."""
    return child_name(federation, "config")


def pvc_name(federation: str, group: str | None = None) -> str:
    """PVC holding the PS checkpoints, so a rolled or rescheduled PS keeps the global model (one per group)."""
    return child_name(federation, f"checkpoints-{group}" if group else "checkpoints")


def ps_shard_name(federation: str, index: int) -> str:
    """One PS shard's Deployment and Service (`<federation>-ps-shard-<i>`, the front's default dial name)."""
    return child_name(federation, f"ps-shard-{index}")


def shard_pvc_name(federation: str, index: int) -> str:
    """PVC holding one PS shard's slice of the model and its staged pushes."""
    return child_name(federation, f"checkpoints-shard-{index}")


def peer_secret_name(federation: str) -> str:
    """Secret holding the secret the federation's PSs and split trainer share for PS-to-PS calls."""
    return child_name(federation, "peer")


def trainer_name(federation: str) -> str:
    """The FSL-SAGE split trainer's Deployment and Service."""
    return child_name(federation, "trainer")


def trainer_pvc_name(federation: str) -> str:
    """PVC holding the split trainer's server-side blocks."""
    return child_name(federation, "trainer-state")


def client_id(site: str, siteclient: str) -> str:
    """Stable across attempts, so the PS and the client's checkpoints recognise a relaunched client."""
    return f"{site}.{siteclient}"


def job_name(siteclient: str, attempt: int) -> str:
    """One Job per launch attempt."""
    return child_name(siteclient, str(attempt))


def token_secret_name(siteclient: str, attempt: int) -> str:
    """One Secret per attempt holding that attempt's one-time token."""
    return child_name(siteclient, f"token-{attempt}")
