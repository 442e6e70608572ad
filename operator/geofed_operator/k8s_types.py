"""Small Kubernetes value types shared by the CR specs (resources, tolerations, secret references)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from geofed_operator.keys import k8s_dump
from geofed_operator.openapi import INT_OR_STRING

# A DNS-1123 label: what Kubernetes accepts as most object names (and what we derive names from).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A DNS-1123 subdomain (lower-case labels joined by dots), or a wildcard `*.` before one: a certificate name.
DNS_NAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A TCP port, 1..65535.
PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# An IPv4 address (dotted quad) or an IPv6 address (hex groups and colons, IPv4-mapped tail allowed).
IP_ADDRESS = (
    r"^(((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
    r"|[0-9a-fA-F]{0,4}(:[0-9a-fA-F]{0,4}){2,7}(:[0-9.]+)?)$"
)
# A resource quantity such as `500m`, `16Gi` or `2` (the API server's own int-or-string form).
QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
Quantity = Annotated[int | str, Field(json_schema_extra={INT_OR_STRING: True, "pattern": QUANTITY})]


class K8sModel(BaseModel):
    """Base of every spec section we define: unknown keys are errors, as in `geofed.config`."""

    model_config = ConfigDict(extra="forbid")


class ResourceRequirements(K8sModel):
    """Container requests and limits, passed through to the pod as written."""

    requests: dict[str, Quantity] = Field(default_factory=dict, description="Minimum resources, e.g. cpu: 2.")
    limits: dict[str, Quantity] = Field(default_factory=dict, description="Maximum resources, e.g. memory: 8Gi.")


class Toleration(K8sModel):
    """A pod toleration (lets the pod schedule onto tainted, e.g. preemptible GPU, nodes)."""

    key: str | None = Field(None, max_length=316, description="Taint key; empty with Exists matches all.")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="How value is compared.")
    value: str | None = Field(None, max_length=63, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate; empty tolerates all effects."
    )
    toleration_seconds: int | None = Field(
        None, ge=0, description="NoExecute only: how long the pod stays bound after the taint appears."
    )


class SecretKeyRef(K8sModel):
    """One key of a Secret in the object's own namespace."""

    name: str = Field(min_length=1, max_length=253, description="Secret name.")
    key: str = Field("credential", min_length=1, max_length=253, description="Key within the Secret.")


class CASecretRef(SecretKeyRef):
    """The PEM CA bundle that signs the PS certificate."""

    key: str = Field("ca.crt", min_length=1, max_length=253, description="Key within the Secret.")


class EnvVar(K8sModel):
    """A plain environment variable for the container."""

    name: str = Field(min_length=1, max_length=253, description="Variable name.")
    value: str = Field("", max_length=32768, description="Variable value.")


class LocalObjectReference(K8sModel):
    """An object in the same namespace, by name (an imagePullSecrets entry)."""

    name: str = Field(min_length=1, max_length=253, description="Object name.")


def _mapping_or_none(value: Any) -> Any:
    if value is not None and not isinstance(value, dict):
        raise ValueError("must be a mapping (a core/v1 Affinity)")
    return value


# A core/v1 Affinity, passed through to the pod as written (the API server validates it on the pod).
Affinity = Annotated[
    Any,
    AfterValidator(_mapping_or_none),
    Field(json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


RUN_AS = 10001  # the non-root user of the images (images/*.Dockerfile)


def nonroot_pod_security() -> dict[str, Any]:
    """Pod securityContext of every pod we run: the images' non-root user, the runtime's seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_placement(spec: Any) -> dict[str, Any]:
    """The pod-spec fields both CRs share: scheduling, pull secrets (only those that are set)."""
    out: dict[str, Any] = {}
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        out["tolerations"] = [k8s_dump(t) for t in spec.tolerations]
    if spec.affinity:
        out["affinity"] = spec.affinity
    if spec.priority_class_name:
        out["priorityClassName"] = spec.priority_class_name
    if spec.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": ref.name} for ref in spec.image_pull_secrets]
    return out


PullPolicy = Literal["Always", "IfNotPresent", "Never"]
