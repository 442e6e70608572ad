"""Small Kubernetes value types shared by the CR specs (resources, tolerations, secret references)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

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


def _exactly_one(rule_fields: tuple[str, ...], what: str) -> dict[str, Any]:
    """A CEL rule (and its message) that exactly one of `rule_fields` (camelCase) is set."""
    count = " + ".join(f"(has(self.{f}) ? 1 : 0)" for f in rule_fields)
    return {"rule": f"{count} == 1", "message": f"{what}: set exactly one of {', '.join(rule_fields)}"}


class KeySelector(K8sModel):
    """One key of a Secret or ConfigMap in the SiteClient's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Object name.")
    key: str = Field(min_length=1, max_length=253, description="Key within it.")
    optional: bool | None = Field(None, description="Start the pod even if the object or key is missing.")


class ObjectFieldSelector(K8sModel):
    """A field of the pod itself (metadata.name, metadata.namespace, spec.nodeName, status.podIP, ...)."""

    field_path: str = Field(min_length=1, max_length=256, description="Path of the field, e.g. spec.nodeName.")
    api_version: str | None = Field(None, max_length=64, description="Schema version of fieldPath (v1).")


_ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef")


class EnvVarSource(K8sModel):
    """Where a variable's value comes from when it is not written in the spec (core/v1 EnvVarSource)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"x-kubernetes-validations": [_exactly_one(_ENV_SOURCES, "valueFrom")]}
    )

    secret_key_ref: KeySelector | None = Field(None, description="A key of a Secret (credentials such as HF_TOKEN).")
    config_map_key_ref: KeySelector | None = Field(None, description="A key of a ConfigMap.")
    field_ref: ObjectFieldSelector | None = Field(None, description="A field of the pod.")

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        if sum(v is not None for v in (self.secret_key_ref, self.config_map_key_ref, self.field_ref)) != 1:
            raise ValueError(f"valueFrom: set exactly one of {', '.join(_ENV_SOURCES)}")
        return self


# A variable name as the API server accepts it (C identifiers plus '-' and '.').
ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


class EnvVar(K8sModel):
    """An environment variable of the container: a literal `value`, or `valueFrom` a Secret, ConfigMap or field."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.value) && has(self.valueFrom))",
                    "message": "env: value and valueFrom exclude each other",
                }  # fmt: skip
            ]
        },
    )

    name: str = Field(min_length=1, max_length=253, pattern=ENV_NAME, description="Variable name.")
    value: str | None = Field(
        None, max_length=32768, description="Literal value (written into the SiteClient and the Job: no secrets)."
    )
    value_from: EnvVarSource | None = Field(None, description="Read the value from a Secret, ConfigMap or the pod.")

    @model_validator(mode="after")
    def _value_or_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("env: value and valueFrom exclude each other")
        return self


class OptionalObjectReference(K8sModel):
    """A Secret or ConfigMap by name, whose every key becomes a variable."""

    name: str = Field(min_length=1, max_length=253, description="Object name.")
    optional: bool | None = Field(None, description="Start the pod even if it is missing.")


class EnvFromSource(K8sModel):
    """Every key of a Secret or ConfigMap as a variable (core/v1 EnvFromSource)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"x-kubernetes-validations": [_exactly_one(("secretRef", "configMapRef"), "envFrom")]},
    )

    prefix: str | None = Field(None, max_length=253, description="Prepended to every key's variable name.")
    secret_ref: OptionalObjectReference | None = Field(None, description="A Secret.")
    config_map_ref: OptionalObjectReference | None = Field(None, description="A ConfigMap.")

    @model_validator(mode="after")
    def _one_source(self) -> EnvFromSource:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("envFrom: set exactly one of secretRef, configMapRef")
        return self


# Variable names that usually hold a secret: a literal value of one is warned about.
SECRET_LIKE_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_?KEY)", re.IGNORECASE)


def literal_secret_names(env: list[EnvVar]) -> list[str]:
    """Names of variables with a literal value whose name suggests a secret (HF_TOKEN, WANDB_API_KEY...)."""
    return [e.name for e in env if e.value and SECRET_LIKE_NAME.search(e.name)]


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
MAX_ID = 2147483647  # the largest UID or GID a pod's securityContext accepts


class PodSecurity(K8sModel):
    """The user and groups a pod runs as; `runAsNonRoot` and the RuntimeDefault seccomp profile are always set.

    Platforms that assign IDs themselves (OpenShift's restricted-v2 SCC picks a UID and fsGroup from
    the namespace's range and refuses others) need `platformAssigned`: the pod then names none.
    """

    run_as_user: int = Field(RUN_AS, ge=1, le=MAX_ID, description="UID of the containers' processes (images' user).")
    run_as_group: int = Field(RUN_AS, ge=0, le=MAX_ID, description="Primary GID of the containers' processes.")
    fs_group: int = Field(RUN_AS, ge=0, le=MAX_ID, description="GID that owns the pod's volumes (made group-writable).")
    platform_assigned: bool = Field(
        False,
        description=(
            "Set no runAsUser, runAsGroup or fsGroup (runAsNonRoot stays true), for OpenShift's restricted-v2 SCC, "
            "which assigns them from the namespace's range; the three fields above are then ignored."
        ),
    )


def nonroot_pod_security(security: PodSecurity | None = None) -> dict[str, Any]:
    """Pod securityContext of every pod we run: non-root, the runtime's seccomp profile, the IDs `security` names."""
    security = security or PodSecurity()
    ids = {} if security.platform_assigned else {
        "runAsUser": security.run_as_user, "runAsGroup": security.run_as_group, "fsGroup": security.fs_group,
    }  # fmt: skip
    return {"runAsNonRoot": True, **ids, "seccompProfile": {"type": "RuntimeDefault"}}


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
