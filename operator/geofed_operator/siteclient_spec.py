"""The `SiteClient` custom resource's spec: one institution's training client for one federation.

A site applies it (from `geofed site enroll`'s output); the operator there mints a one-time token per
launch with the site credential and runs the client as a Job, relaunching it after preemption
(paper §III-B4, Fig. 1 steps 5-6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from geofed.config import ClientConfig
from geofed.ps_groups import GROUP_NAME
from geofed_operator.k8s_types import (
    DNS_LABEL,
    PORT,
    Affinity,
    CASecretRef,
    EnvFromSource,
    EnvVar,
    K8sModel,
    LocalObjectReference,
    PodSecurity,
    PullPolicy,
    Quantity,
    ResourceRequirements,
    SecretKeyRef,
    Toleration,
)
from geofed_operator.keys import from_k8s_keys

_IMMUTABLE = "self == oldSelf"
HOST_PATH_MESSAGE = "data.hostPath.path must be a data directory: not / and without '..'"
# host:port, where host is a DNS name, an IPv4 address or a bracketed IPv6 address, and port is 1..65535.
# Each training process takes its own GPU (cuda:LOCAL_RANK); without GPUs the processes are CPU ranks.
PROCS_WITHIN_GPUS_RULE = "!has(self.procsPerPod) || self.gpusPerPod == 0 || self.procsPerPod <= self.gpusPerPod"
PROCS_WITHIN_GPUS_MESSAGE = "procsPerPod must not exceed gpusPerPod: each training process needs a GPU of its own"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Label keys the operator sets on the client Job and pod (names.py), refused in spec.labels.
OWN_LABELS_RULE = (
    "self.all(k, !k.startsWith('geofed.io/') && !k.startsWith('app.kubernetes.io/') "
    "&& k != 'kueue.x-k8s.io/queue-name')"
)
OWN_LABELS_MESSAGE = (
    "labels must not set geofed.io/*, app.kubernetes.io/* or kueue.x-k8s.io/queue-name: the operator sets them"
)
LabelValue = Annotated[str, Field(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
PS_ADDRESS = rf"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):{PORT}$"
# The client flags the operator sets itself (site_builders.client_command), and the spec field each comes from.
OPERATOR_OWNED_CLIENT_FLAGS: dict[str, str] = {
    "--ps": "psAddress",
    "--client-id": "site and the SiteClient's name",
    "--token-file": "the attempt's one-time token Secret",
    "--data": "data",
    "--work-dir": "workPvc",
    "--group": "group",
    "--insecure": "insecure",
    "--no-insecure": "insecure",
    "--ca": "caSecretRef",
}


def client_flags() -> tuple[str, ...]:
    """Every long option `geofed client` parses: one per ClientConfig field (and `--no-X` for a switch)."""
    out = ["--help", "--log-level"]
    for name, info in ClientConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        out += [flag, "--no-" + flag[2:]] if info.annotation is bool else [flag]
    return tuple(out)


def flag_spellings(flag: str, flags: tuple[str, ...]) -> tuple[str, ...]:
    """What argparse (allow_abbrev) reads as `flag`: the flag, and each prefix of it no other flag shares."""
    prefixes = [flag[:k] for k in range(3, len(flag))]
    return (flag, *(p for p in prefixes if p not in flags and [f for f in flags if f.startswith(p)] == [flag]))


def owned_flag_message(flag: str) -> str:
    """The refusal of an operator-owned flag in extraArgs, naming it and the field that sets it."""
    return f"extraArgs must not set {flag}: the operator sets it (from {OPERATOR_OWNED_CLIENT_FLAGS[flag]})"


def _owned_flag_rules() -> list[dict[str, str]]:
    """One CEL rule per operator-owned flag, on each extraArgs item: `--flag`, `--flag=v` or an abbreviation."""
    flags = client_flags()
    return [
        {"rule": f"!self.matches('^(?:{'|'.join(flag_spellings(f, flags))})(=|$)')", "message": owned_flag_message(f)}
        for f in OPERATOR_OWNED_CLIENT_FLAGS
    ]


def owned_flag_in(arg: str) -> str | None:
    """The operator-owned flag `arg` sets, as argparse would read it; None if it sets none."""
    flags = client_flags()
    name = arg.split("=", 1)[0]
    return next((f for f in OPERATOR_OWNED_CLIENT_FLAGS if name in flag_spellings(f, flags)), None)


# At most 1024 characters: the rules' regular expressions run on each item, within the API server's CEL cost budget.
ExtraArg = Annotated[str, Field(max_length=1024, json_schema_extra={"x-kubernetes-validations": _owned_flag_rules()})]


class PVCSource(K8sModel):
    """An existing PersistentVolumeClaim."""

    claim_name: str = Field(
        min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="PVC name in the SiteClient's namespace."
    )
    read_only: bool = Field(True, description="Mount read-only.")


class HostPathSource(K8sModel):
    """A directory on the node (for single-node sites; needs the data on every GPU node)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.path != '/' && !self.path.contains('..')", "message": HOST_PATH_MESSAGE}
            ]
        }
    )

    path: str = Field(
        min_length=2,
        max_length=4096,
        pattern=r"^/[^/]",
        description="Absolute path on the node, mounted read-only; not / and without '..'.",
    )

    @model_validator(mode="after")
    def _not_root(self) -> HostPathSource:
        if self.path.rstrip("/") == "" or ".." in self.path:
            raise ValueError(HOST_PATH_MESSAGE)
        return self


class DataVolume(K8sModel):
    """Where the site's training data lives; exactly one of pvc and hostPath."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.pvc) != has(self.hostPath)",
                    "message": "set exactly one of data.pvc and data.hostPath",
                }
            ]
        }
    )

    pvc: PVCSource | None = Field(None, description="Data from a PVC.")
    host_path: HostPathSource | None = Field(None, description="Data from a node directory.")
    sub_path: str | None = Field(None, max_length=4096, description="Sub-directory of the volume to mount.")

    @model_validator(mode="after")
    def _exactly_one(self) -> DataVolume:
        if (self.pvc is None) == (self.host_path is None):
            raise ValueError("set exactly one of data.pvc and data.hostPath")
        return self


class BackoffSpec(K8sModel):
    """Delay before relaunching after a failure: initial * 2^(n-1) for the n-th failure in a row, capped."""

    initial_s: float = Field(10.0, ge=0, le=3600, description="Delay after the first failure.")
    max_s: float = Field(600.0, ge=0, le=86400, description="Upper bound of the delay.")
    reset_after_s: float = Field(
        600.0,
        ge=0,
        description="An attempt that ran this long resets the failure streak (preemption, not a crash loop).",
    )
    max_restarts: int = Field(0, ge=0, description="Give up (phase Failed) after this many relaunches; 0 = never.")


class SiteClientSpec(K8sModel):
    """Desired state of one site's client: which federation, how to authenticate, what to run where."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.caSecretRef) && self.insecure)",
                    "message": "caSecretRef and insecure exclude each other",
                },
                {"rule": PROCS_WITHIN_GPUS_RULE, "message": PROCS_WITHIN_GPUS_MESSAGE},
            ]
        }
    )

    federation: str = Field(
        min_length=1,
        max_length=63,
        description="Federation this client joins (informational: psAddress decides). Immutable.",
        json_schema_extra={"x-kubernetes-validations": [{"rule": _IMMUTABLE, "message": "federation is immutable"}]},
    )
    site: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        description="Site name the credential was issued for; the client id is <site>.<name>. Immutable.",
        json_schema_extra={"x-kubernetes-validations": [{"rule": _IMMUTABLE, "message": "site is immutable"}]},
    )
    ps_address: str = Field(
        max_length=261,
        pattern=PS_ADDRESS,
        description="host:port of the PS, dialled outbound only (with PS groups: this client's group's PS).",
    )
    group: str | None = Field(
        None,
        max_length=40,
        pattern=GROUP_NAME,
        description="The federation's PS group this client belongs to (multi-PS); psAddress must be that group's "
        "PS. Not checked here: the PS refuses an unknown or another group at Join, shown as Degraded.",
    )
    credential_secret_ref: SecretKeyRef = Field(
        description="Secret holding the site credential from `geofed site enroll`."
    )
    ca_secret_ref: CASecretRef | None = Field(None, description="Secret holding the CA that signs the PS certificate.")
    insecure: bool = Field(False, description="Plaintext gRPC to the PS (local testing only).")
    master: bool = Field(
        False,
        description="Ask for a master token: this client bootstraps the global model (Fig. 1 steps 1-2). The PS "
        "grants it only to the client the Federation names in spec.server.masterClientID (which needs no flag).",
    )
    image: str | None = Field(
        None, max_length=512, description="Client image; the operator's default (chart value) when unset."
    )
    image_pull_policy: PullPolicy = Field("IfNotPresent", description="Image pull policy.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, description="Secrets for pulling the client image from a private registry."
    )
    gpus_per_pod: int = Field(1, ge=0, le=64, description="GPUs requested by the client pod.")
    gpu_resource_name: str = Field("nvidia.com/gpu", max_length=253, description="Extended resource name of a GPU.")
    procs_per_pod: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Training processes (torchrun --nproc-per-node); defaults to gpusPerPod or 1. At most "
        "gpusPerPod when GPUs are requested (a process per GPU); any number of CPU ranks without.",
    )
    gpu_toleration: bool = Field(
        True,
        description="With gpusPerPod > 0, tolerate the NoSchedule taint keyed gpuResourceName (any value) that GPU "
        "node pools carry (EKS, GKE), as ExtendedResourceToleration would; a toleration in tolerations with that key "
        "replaces it. false: tolerations only.",
    )
    runtime_class_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="RuntimeClass of the client pod: 'nvidia' where the NVIDIA runtime is not the nodes' default "
        "(k3s, RKE2, some GPU Operator set-ups). Unset: the node's default runtime.",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="Client container resources."
    )
    data: DataVolume = Field(description="The site's training data, mounted at /data.")
    work_pvc: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="PVC for the work dir (checkpoints, optimizer state) to resume from; emptyDir if unset.",
    )
    shm_size: Quantity = Field("2Gi", description="Size of /dev/shm for data loaders.")
    token_ttl_s: float = Field(
        0.0,
        ge=0,
        description="Lifetime of each minted one-time token (covers scheduling delay); 0 = the PS default.",
    )
    backoff: BackoffSpec = Field(default_factory=BackoffSpec, description="Relaunch backoff.")
    history_limit: int = Field(2, ge=0, le=100, description="Finished attempts' Jobs kept for inspection.")
    suspend: bool = Field(
        False,
        description="Suspended: the running attempt's Job is stopped and no attempt is launched until it is "
        "set back to false (then a new attempt starts with a fresh token; not counted as a restart).",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels the client pod requires.")
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations, e.g. for preemptible GPU nodes."
    )
    priority_class_name: str | None = Field(None, max_length=253, description="PriorityClass of the client pod.")
    affinity: Affinity = Field(None, description="Affinity of the client pod (core/v1 Affinity, as written).")
    pod_security_context: PodSecurity = Field(
        default_factory=PodSecurity,
        description="The client pod's user and groups (10001, the images' user); platformAssigned leaves them to the "
        "platform (OpenShift's restricted-v2 SCC).",
    )
    pod_annotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations of the client pod.")
    labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        description="Extra labels of the client Job and pod (a Kueue priority class, a cost centre); keys under "
        "geofed.io/ and app.kubernetes.io/ and Kueue's queue-name label are the operator's and refused.",
        json_schema_extra={"x-kubernetes-validations": [{"rule": OWN_LABELS_RULE, "message": OWN_LABELS_MESSAGE}]},
    )
    attempt_deadline_s: int | None = Field(
        None,
        ge=60,
        description="Longest an attempt may run (the Job's activeDeadlineSeconds); a timed-out attempt counts as "
        "a failure and is relaunched with a new token. Unset: no limit.",
    )
    service_account_name: str | None = Field(None, max_length=253, description="ServiceAccount of the client pod.")
    queue_name: str | None = Field(
        None,
        max_length=63,
        pattern=DNS_SUBDOMAIN,
        description="Kueue LocalQueue of the client Job (label kueue.x-k8s.io/queue-name): the Job is created "
        "suspended and Kueue starts it on admission. Set tokenTtlSeconds to cover the wait in the queue.",
    )
    scheduler_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="Scheduler of the client pod (e.g. volcano, a gang scheduler); unset: the default scheduler.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=256,
        description="Extra environment variables: a literal value, or valueFrom a Secret (credentials such as "
        "HF_TOKEN never need to be in the SiteClient), a ConfigMap or a pod field.",
    )
    env_from: list[EnvFromSource] = Field(
        default_factory=list, max_length=64, description="Every key of these Secrets or ConfigMaps as a variable."
    )
    extra_args: list[ExtraArg] = Field(
        default_factory=list,
        max_length=256,
        description="Extra arguments appended to the client command (`geofed client --help`); not the flags the "
        "operator sets from the spec (--ps, --client-id, --token-file, --data, --work-dir, --group, --insecure, --ca).",
    )

    @field_validator("labels")
    @classmethod
    def _labels_not_owned(cls, value: dict[str, str]) -> dict[str, str]:
        owned = [k for k in value
                 if k.startswith(("geofed.io/", "app.kubernetes.io/")) or k == "kueue.x-k8s.io/queue-name"]
        if owned:
            raise ValueError(f"{OWN_LABELS_MESSAGE} (got {', '.join(sorted(owned))})")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_owned_flag(cls, args: list[str]) -> list[str]:
        for arg in args:
            flag = owned_flag_in(arg)
            if flag is not None:
                raise ValueError(owned_flag_message(flag))
        return args

    @model_validator(mode="after")
    def _check(self) -> SiteClientSpec:
        if self.ca_secret_ref is not None and self.insecure:
            raise ValueError("caSecretRef and insecure exclude each other")
        if self.procs_per_pod and self.gpus_per_pod and self.procs_per_pod > self.gpus_per_pod:
            raise ValueError(PROCS_WITHIN_GPUS_MESSAGE)
        return self

    @property
    def gpu_tolerations(self) -> list[Toleration]:
        """`tolerations`, plus the GPU taint's (gpuResourceName, Exists, NoSchedule) when GPUs are requested,
        `gpu_toleration` is on and no toleration of `tolerations` names that key."""
        key = self.gpu_resource_name
        if not self.gpus_per_pod or not self.gpu_toleration or any(t.key == key for t in self.tolerations):
            return list(self.tolerations)
        return [*self.tolerations, Toleration(key=key, operator="Exists", effect="NoSchedule")]

    @property
    def nproc(self) -> int:
        """Processes per pod: explicit, else one per GPU, else one."""
        return self.procs_per_pod or max(1, self.gpus_per_pod)


def parse_siteclient_spec(spec: Mapping[str, Any]) -> SiteClientSpec:
    """A SiteClient's camelCase `.spec` as a validated model (pydantic ValidationError if bad)."""
    return SiteClientSpec.model_validate(from_k8s_keys(SiteClientSpec, spec))
