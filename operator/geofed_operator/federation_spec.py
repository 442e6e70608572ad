"""The `Federation` custom resource's spec: `geofed.config.FederationConfig` plus Kubernetes fields.

The training sections (model, aggregation, codec, training, paradigm) and the PS `server` section are
taken field by field from `geofed.config`, the one source of truth; only what Kubernetes needs on top
(image, resources, Service, storage, TLS, scheduling) is defined here.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, create_model, model_validator

from geofed.config import FederationConfig, ServerConfig
from geofed.paradigms import ParadigmSettings, paradigms_with
from geofed_operator.k8s_types import (
    DNS_NAME,
    IP_ADDRESS,
    Affinity,
    K8sModel,
    LocalObjectReference,
    PodSecurity,
    PullPolicy,
    Quantity,
    ResourceRequirements,
    Toleration,
)
from geofed_operator.keys import from_k8s_keys

# What the PS asks for when the spec names no resources (it holds the global model and the pushes in memory).
PS_REQUESTS = {"cpu": "1", "memory": "2Gi"}
# ServerConfig fields the operator sets itself (paths inside the pod, ports from `service`, TLS files).
OPERATOR_OWNED_SERVER_FIELDS = frozenset(
    {
        "host",
        "port",
        "metrics_port",
        "insecure",
        "tls_cert",
        "tls_key",
        "client_ca",
        "checkpoint_dir",
        "admin_token_file",
        "group",  # one PS per declared group, each started with its own
        "peer_token_file",  # the generated peer-secret Secret
        "peer_ca",  # the served TLS Secret's ca.crt
        "shard_role",  # psShards > 1: the front Deployment and one Deployment per shard, each with its own
        "shard_index",
        "shard_addresses",  # the shard Services' in-cluster DNS names
    }
)

PSServerSettings = create_model(  # type: ignore[call-overload]
    "PSServerSettings",
    __base__=K8sModel,
    __doc__="Parameter-server process settings (geofed.config.ServerConfig minus what the operator sets).",
    **{
        name: (info.annotation, info)
        for name, info in ServerConfig.model_fields.items()
        if name not in OPERATOR_OWNED_SERVER_FIELDS
    },
)


METRICS_PORT_MESSAGE = "service.metricsPort must differ from service.port: the PS listens on both"


class ServiceSpec(K8sModel):
    """How the PS is exposed: one gRPC port clients dial out to (paper §III-B2), one metrics port."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.nodePort) || self.type != 'ClusterIP'",
                    "message": "nodePort needs type NodePort or LoadBalancer",
                },
                {"rule": "!has(self.metricsPort) || !has(self.port) || self.metricsPort != self.port",
                 "message": METRICS_PORT_MESSAGE},
            ]
        }
    )

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP",
        description="Service type; sites outside the cluster need LoadBalancer or NodePort (or an Ingress).",
    )
    port: int = Field(7443, ge=1, le=65535, description="gRPC port (the PS listens on the same port).")
    metrics_port: int = Field(7444, ge=1, le=65535, description="Prometheus metrics port.")
    node_port: int | None = Field(
        None, ge=30000, le=32767, description="Fixed nodePort for gRPC (NodePort/LoadBalancer)."
    )
    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations, e.g. for a cloud load balancer."
    )
    load_balancer_source_ranges: list[str] = Field(
        default_factory=list, description="CIDRs allowed to reach a LoadBalancer (the sites' egress ranges)."
    )

    @model_validator(mode="after")
    def _ports_differ(self) -> ServiceSpec:
        if self.metrics_port == self.port:
            raise ValueError(f"{METRICS_PORT_MESSAGE} ({self.port})")
        return self


class StorageSpec(K8sModel):
    """The PVC for PS checkpoints: the global model survives restarts, rolls and rescheduling."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    # `self == oldSelf` on the field itself never runs when the field is added or removed.
                    "rule": "has(self.storageClassName) == has(oldSelf.storageClassName)",
                    "message": "storageClassName is immutable (it cannot be set or unset after creation)",
                }
            ]
        }
    )

    size: Quantity = Field("10Gi", description="Requested capacity.")
    storage_class_name: str | None = Field(
        None,
        max_length=253,
        description="StorageClass; the cluster default when unset. Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "storageClassName is immutable"}]
        },
    )
    retain_on_delete: bool = Field(
        False, description="Keep the PVC (and the global model) when the Federation is deleted."
    )


def _ip_address(value: str) -> str:
    """An address the certificate can hold (the pattern admits a few non-addresses such as '::::')."""
    ipaddress.ip_address(value)  # ValueError names the value
    return value


IPAddress = Annotated[str, Field(max_length=45, pattern=IP_ADDRESS), AfterValidator(_ip_address)]


class TLSSpec(K8sModel):
    """Names the generated self-signed certificate covers (ignored with tlsSecretName)."""

    dns_names: list[Annotated[str, Field(max_length=253, pattern=DNS_NAME)]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra DNS names, e.g. the load balancer's hostname sites dial: lower-case DNS-1123 "
        "subdomains, or a wildcard such as *.example.org.",
    )
    ip_addresses: list[IPAddress] = Field(
        default_factory=list, max_length=64, description="Extra IP addresses (IPv4 or IPv6), e.g. the load balancer's."
    )
    validity_days: int = Field(365, ge=1, le=3650, description="Lifetime of the generated server certificate.")


class SplitTrainerSpec(K8sModel):
    """The FSL-SAGE server-side trainer (created only when paradigm.name is fsl-sage)."""

    image: str | None = Field(
        None, max_length=512, description="Trainer image (needs torch); the operator's client image when unset."
    )
    port: int = Field(7450, ge=1, le=65535, description="gRPC port of the trainer and its Service.")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Trainer container resources (e.g. a GPU)."
    )
    storage_size: Quantity = Field("10Gi", description="PVC for the server-side blocks (--out).")


class _FederationK8sFields(K8sModel):
    """Kubernetes-only settings of a Federation."""

    server: PSServerSettings = Field(default_factory=PSServerSettings, description="PS process settings.")  # type: ignore[valid-type]
    image: str | None = Field(
        None,
        max_length=512,
        description="PS container image; the operator's default (chart value) when unset.",
    )
    image_pull_policy: PullPolicy = Field("IfNotPresent", description="Image pull policy.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, description="Secrets for pulling the PS image from a private registry."
    )
    resources: ResourceRequirements = Field(
        default_factory=lambda: ResourceRequirements(requests=dict(PS_REQUESTS)),
        description="PS container resources; when omitted, requests of 1 CPU and 2Gi of memory (so the PS "
        "is not the first pod a node evicts under pressure).",
        json_schema_extra={"default": {"requests": PS_REQUESTS}},
    )
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The PS Service.")
    storage: StorageSpec = Field(default_factory=StorageSpec, description="The PS checkpoint volume.")
    tls_secret_name: str | None = Field(
        None,
        max_length=253,
        description="kubernetes.io/tls Secret (tls.crt, tls.key, optional ca.crt) the PS serves; "
        "a self-signed one is generated when unset.",
    )
    tls: TLSSpec = Field(default_factory=TLSSpec, description="Generated certificate options.")
    insecure: bool = Field(False, description="Serve plaintext gRPC (local clusters only).")
    termination_grace_period_s: int = Field(
        120, ge=10, le=3600, description="Seconds the PS gets to checkpoint on SIGTERM before it is killed."
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels the PS pod requires.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Tolerations of the PS pod.")
    priority_class_name: str | None = Field(None, max_length=253, description="PriorityClass of the PS pod.")
    affinity: Affinity = Field(None, description="Affinity of the PS pod (core/v1 Affinity, as written).")
    pod_security_context: PodSecurity = Field(
        default_factory=PodSecurity,
        description="User and groups of the PS, its shards and the split trainer (10001, the images' user); "
        "platformAssigned leaves them to the platform (OpenShift's restricted-v2 SCC).",
    )
    pod_annotations: dict[str, str] = Field(
        default_factory=dict, description="Extra annotations of the PS pod (e.g. for a service mesh)."
    )
    split_trainer: SplitTrainerSpec = Field(
        default_factory=SplitTrainerSpec, description="The split trainer (paradigm fsl-sage only)."
    )
    pod_disruption_budget: bool = Field(
        True,
        description="A PodDisruptionBudget (minAvailable 1) that keeps node drains from evicting a healthy PS "
        "mid-training; a drain then waits until the PS is moved deliberately.",
    )


# Transition rules (CEL) the API server enforces on update, plus the one cross-field rule of the model.
_RULES: dict[str, list[dict[str, str]]] = {
    "model": [
        {
            "rule": "self == oldSelf",
            "message": "model is immutable: the global model cannot change shape; create a new Federation",
        },
        {"rule": "self.nEmbd % self.nHead == 0", "message": "model.nEmbd must be divisible by model.nHead"},
    ],
    "paradigm": [{"rule": "self == oldSelf", "message": "paradigm is immutable"}],
    # Each group's PS has its own Deployment, PVC and model copy; a new or dropped group is a new federation.
    "groups": [{"rule": "self == oldSelf", "message": "groups are immutable: create a new Federation"}],
    # The shard map (which shard owns which slice) is fixed when the model is installed.
    "ps_shards": [{"rule": "self == oldSelf", "message": "psShards is immutable: create a new Federation"}],
}


# Cross-field rules of FederationConfig the API server can check itself (a sharded PS); the
# operator still reports any other FederationConfig refusal as InvalidSpec (FederationObject.from_body).
def spec_rules(paradigms: Iterable[type[ParadigmSettings]] | None = None) -> list[dict[str, str]]:
    """The spec-wide CEL rules; which paradigms (every declared one, by default) a sharded PS takes is read from
    their `elementwise` capability."""
    sharded = list(paradigms_with("elementwise", paradigms))
    return [
        {
            "rule": "self.psShards == 1 || !has(self.groups) || size(self.groups) == 0",
            "message": "psShards > 1 cannot be combined with PS groups",
        },
        {
            "rule": "self.psShards == 1 || self.paradigm.name in " + str(sharded),
            "message": "psShards > 1 needs a paradigm that exchanges parameters element by element: "
            f"{', '.join(sharded)}",
        },
        *CROSS_FIELD_RULES,
    ]


def _given(*paths: str) -> str:
    """`has()` of each `self.<path>` and its parents: the API server fills the defaults in, a bare spec may not."""
    steps = dict.fromkeys(
        f"has(self.{p[:i]})" for p in paths for i in [*(j for j, c in enumerate(p) if c == "."), len(p)]
    )
    return " && ".join(steps)


_NO_GROUPS = "(!has(self.groups) || size(self.groups) == 0)"
_ONE_SHARD = "(!has(self.psShards) || self.psShards == 1)"
# Rules the models check at reconcile time (FederationConfig's sections, `_check` below), written for the API server.
CROSS_FIELD_RULES: list[dict[str, str]] = [
    {
        "rule": f"!({_given('tlsSecretName', 'insecure')} && self.insecure)",
        "message": "tlsSecretName and insecure exclude each other",
    },
    {
        "rule": f"!({_given('service.nodePort', 'groups')} && size(self.groups) > 1)",
        "message": "service.nodePort cannot be shared by several PS groups' Services; leave it unset",
    },
    {
        "rule": f"!({_given('aggregation.mode')} && self.aggregation.mode == 'auto') || ({_ONE_SHARD} && {_NO_GROUPS})",
        "message": "aggregation.mode 'auto' needs one PS: it cannot be combined with groups or psShards > 1",
    },
    {
        "rule": f"!({_given('codec.blockScales')} && self.codec.blockScales > 0 && self.codec.blockScales < 64)",
        "message": "codec.blockScales must be 0 or at least 64",
    },
    {
        "rule": f"!({_given('autotune.intervalMinSeconds', 'autotune.intervalMaxSeconds')} && "
        "self.autotune.intervalMinSeconds > self.autotune.intervalMaxSeconds)",
        "message": "autotune.intervalMinSeconds must not exceed intervalMaxSeconds",
    },
    {
        "rule": f"!({_given('autotune.stragglerMinSeconds', 'autotune.stragglerMaxSeconds')} && "
        "self.autotune.stragglerMinSeconds > self.autotune.stragglerMaxSeconds)",
        "message": "autotune.stragglerMinSeconds must not exceed stragglerMaxSeconds",
    },
    {
        "rule": f"!({_given('autotune.syncBelow', 'autotune.asyncAbove')} && "
        "self.autotune.syncBelow >= self.autotune.asyncAbove)",
        "message": "autotune.syncBelow must be below asyncAbove, else the mode advice has no hysteresis",
    },
]


_SPEC_RULES = spec_rules()


class _SpecBase(K8sModel):
    """Carries the spec-wide CEL rules into the CRD's `spec` node."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _SPEC_RULES})


def _training_field(name: str) -> tuple[Any, Any]:
    info = copy.copy(FederationConfig.model_fields[name])
    if name in _RULES:
        info.json_schema_extra = {"x-kubernetes-validations": _RULES[name]}
    return info.annotation, info


def _check(spec: Any) -> Any:
    """The rules above, also enforced where no API server is in the way (tests, `geofed site`)."""
    if spec.model.n_embd % spec.model.n_head:
        raise ValueError(f"model.nEmbd ({spec.model.n_embd}) must be divisible by model.nHead ({spec.model.n_head})")
    if spec.tls_secret_name and spec.insecure:
        raise ValueError("tlsSecretName and insecure exclude each other")
    if len(spec.groups) > 1 and spec.service.node_port is not None:
        raise ValueError("service.nodePort cannot be shared by several PS groups' Services; leave it unset")
    return spec


FederationSpec = create_model(  # type: ignore[call-overload]
    "FederationSpec",
    __base__=_SpecBase,
    __doc__="Desired state of a federation: what is trained (geofed.config) and how the PS runs.",
    __validators__={"check": model_validator(mode="after")(_check)},
    **{name: _training_field(name) for name in FederationConfig.model_fields if name != "name"},
    **{name: (info.annotation, info) for name, info in _FederationK8sFields.model_fields.items()},
)


def parse_federation_spec(spec: Mapping[str, Any]) -> Any:
    """A Federation's camelCase `.spec` as a validated `FederationSpec` (pydantic ValidationError if bad)."""
    return FederationSpec.model_validate(from_k8s_keys(FederationSpec, spec))


def spec_to_federation_config(spec: Mapping[str, Any], name: str = "default") -> FederationConfig:
    """The `geofed.config.FederationConfig` a Federation describes (what the PS loads, what clients get)."""
    parsed = parse_federation_spec(spec)
    sections = {field: getattr(parsed, field) for field in FederationConfig.model_fields if field != "name"}
    return FederationConfig(name=name, **sections)
