"""Status schemas of both resources, following the Kubernetes API conventions.

`conditions` (Ready, Progressing, Degraded with reason and message) and `observedGeneration`, plus
what `kubectl get` shows in its columns. Handlers build status patches through these models, so what
they write always fits the CRD schema (the API server would silently prune anything else).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from geofed_operator.k8s_types import K8sModel
from geofed_operator.keys import from_k8s_keys, to_k8s_keys

ConditionType = Literal["Ready", "Progressing", "Degraded"]
# Conditions are a map keyed by type (so server-side apply merges them per type).
_CONDITIONS_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


class Condition(K8sModel):
    """One observation of the object's state (metav1.Condition)."""

    type: str = Field(max_length=316, description="Ready, Progressing or Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds.")
    reason: str = Field(max_length=1024, description="CamelCase reason code.")
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: str = Field(
        json_schema_extra={"format": "date-time"}, description="When status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(None, ge=0, description="metadata.generation this was set for.")


FederationPhase = Literal["Pending", "Progressing", "Running", "Degraded"]
SiteClientPhase = Literal["Pending", "Launching", "Running", "Backoff", "Degraded", "Suspended", "Succeeded", "Failed"]


class SiteContribution(K8sModel):
    """One site's contribution to the global model: the PS's accounting summed over the site's clients."""

    site: str = Field(max_length=253, description="Site name (empty for clients minted without one).")
    clients: int = Field(ge=0, description="Clients of the site the PS knows.")
    tokens_trained: int = Field(ge=0, description="Server-vouched tokens behind its applied deltas.")
    update_mass: float = Field(
        ge=0,
        description="Sum of weight x L2 norm of its applied deltas, after the norm bound and clipping; the "
        "weight carries the staleness discount.",
    )
    share_window: float = Field(
        ge=0, le=1, description="Its share of the applied update mass over the PS's contribution window."
    )
    share_run: float = Field(ge=0, le=1, description="Its share of the applied update mass over the run.")
    compute_seconds: float = Field(ge=0, description="Compute-seconds behind its applied deltas.")


class PrivacyStatus(K8sModel):
    """The PS's privacy accountant: what site-level differential privacy has spent so far."""

    mode: str = Field(max_length=16, description="Where noise is added: central (the PS) or local (the clients).")
    epsilon: float = Field(ge=0, description="ε spent so far at delta, after the latest published version.")
    delta: float = Field(ge=0, le=1, description="δ of the (ε, δ) guarantee.")
    budget: float | None = Field(None, ge=0, description="The most ε the federation may spend; unset: no limit.")
    versions: int = Field(ge=0, description="Published versions the accountant has composed.")
    spent: bool = Field(description="One more version would spend beyond the budget (on_budget 'stop': training "
                        "has stopped).")
    clip_norm: float = Field(ge=0, description="Clip norm C in force.")
    noise_multiplier: float = Field(ge=0, description="Noise multiplier σ.")


class GroupStatus(K8sModel):
    """One PS group's PS, as its GetStatus reports it (multi-PS federations)."""

    name: str = Field(max_length=40, description="Group name.")
    ps_address: str = Field(max_length=261, description="In-cluster host:port of the group's PS.")
    public_address: str | None = Field(
        None, max_length=261, description="host:port the group's sites dial (--ps-address of `geofed site enroll`)."
    )
    version: int = Field(ge=0, description="Global model version on the group's PS.")
    has_model: bool = Field(description="Whether the group's PS holds a model.")
    connected_clients: int = Field(ge=0, description="Clients with an open stream to this PS.")
    ring_allreduces: int = Field(
        ge=0, description="Ring all-reduces this PS committed with another PS, since its process started."
    )
    ring_members: list[str] = Field(
        default_factory=list, max_length=64, description="Groups in this PS's current ring (sorted)."
    )


class ShardStatus(K8sModel):
    """One shard of a sharded PS, as the front's GetStatus reports it."""

    index: int = Field(ge=0, le=63, description="Shard index: it owns the index-th contiguous slice of the model.")
    address: str = Field("", max_length=261, description="In-cluster host:port the front dials.")
    up: bool = Field(description="Whether the shard answered the front's last call.")
    version: int = Field(ge=0, description="Global model version its slice holds.")
    instance: str = Field("", max_length=253, description="Changes on every start of the shard.")
    last_error: str = Field("", max_length=4096, description="Why the front's last call to it failed (empty: none).")


class FederationStatus(K8sModel):
    """Observed state of a federation, polled from the PS admin API."""

    phase: FederationPhase | None = Field(None, description="Summary of the conditions.")
    observed_generation: int | None = Field(None, ge=0, description="Last metadata.generation reconciled.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Progressing, Degraded.", json_schema_extra=_CONDITIONS_LIST
    )
    version: int | None = Field(None, ge=0, description="Global model version on the PS.")
    connected_clients: int | None = Field(None, ge=0, description="Clients with an open stream.")
    known_clients: int | None = Field(None, ge=0, description="Clients that ever joined.")
    mode: str | None = Field(None, max_length=63, description="Aggregation mode the PS runs.")
    buffered_deltas: int | None = Field(None, ge=0, description="Deltas waiting for the next outer step.")
    train_loss: float | None = Field(None, description="Latest training loss reported by a client.")
    eval_loss: float | None = Field(None, description="Latest evaluation loss reported by a client.")
    has_model: bool | None = Field(None, description="Whether the master client has uploaded the model yet.")
    num_parameters: int | None = Field(None, ge=0, description="Parameters in the global model.")
    server_instance: str | None = Field(None, max_length=253, description="Changes on every PS start.")
    ps_address: str | None = Field(None, max_length=261, description="In-cluster host:port of the PS.")
    public_address: str | None = Field(
        None,
        max_length=261,
        description="host:port sites dial (the load balancer's, or <node-address>:nodePort); the "
        "--ps-address of `geofed site enroll`.",
    )
    admin_secret_name: str | None = Field(None, max_length=253, description="Secret with the admin credential.")
    tls_secret_name: str | None = Field(None, max_length=253, description="Secret with the served certificate.")
    tls_note: str | None = Field(None, max_length=1024, description="How TLS is set up, e.g. generated self-signed.")
    config_hash: str | None = Field(None, max_length=64, description="Hash of the PS configuration now rolled out.")
    sites: list[SiteContribution] | None = Field(
        None, max_length=1000, description="Per-site contribution accounting (docs/status.md), by site name."
    )
    groups: list[GroupStatus] | None = Field(
        None, max_length=64, description="Per PS group (multi-PS federations): each group's PS status."
    )
    shards: list[ShardStatus] | None = Field(
        None, max_length=64, description="Per PS shard (psShards > 1): each shard as the front sees it."
    )
    shards_up: str | None = Field(
        None,
        max_length=16,
        description="Shards up as the front last saw them, as `up/N` (the Shards column of kubectl get -o wide).",
    )
    group_versions: str | None = Field(
        None,
        max_length=4096,
        description="The groups' model versions as `group=version,...` (the Groups column of kubectl get).",
    )
    privacy: PrivacyStatus | None = Field(
        None, description="Site-level differential privacy's accountant (spec.federation.privacy.enabled)."
    )


class SiteClientStatus(K8sModel):
    """Observed state of a site client: its current launch attempt and restart history."""

    phase: SiteClientPhase | None = Field(None, description="Lifecycle phase.")
    observed_generation: int | None = Field(None, ge=0, description="Last metadata.generation reconciled.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded, Suspended; Complete or Failed once finished (as a Job's).",
        json_schema_extra=_CONDITIONS_LIST,
    )
    client_id: str | None = Field(None, max_length=253, description="Id the client joins the PS with (<site>.<name>).")
    attempt: int | None = Field(None, ge=0, description="Current launch attempt (1-based).")
    attempt_generation: int | None = Field(None, ge=0, description="metadata.generation the attempt was launched with.")
    restarts: int | None = Field(None, ge=0, description="Relaunches after failures (preemption, eviction, crash).")
    consecutive_failures: int | None = Field(None, ge=0, description="Failures in a row (drives the backoff).")
    current_job: str | None = Field(None, max_length=253, description="Job of the current attempt.")
    token_secret: str | None = Field(None, max_length=253, description="Secret with the current attempt's token.")
    token_expires_at: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="When the current token expires unless used.",
    )
    start_time: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When the first attempt launched."
    )
    completion_time: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When it finished (Complete or Failed)."
    )
    launch_time: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When the current attempt launched."
    )
    running_since: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When the current attempt's pod started."
    )
    next_launch_time: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="Backoff: when the next attempt launches.",
    )
    last_failure_reason: str | None = Field(None, max_length=1024, description="Why the last attempt ended.")
    last_failure_message: str | None = Field(None, max_length=32768, description="Details of the last failure.")
    last_sync_time: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="When the PS last heard from this client.",
    )


def status_patch(
    model: type[FederationStatus] | type[SiteClientStatus],
    *,
    conditions: list[dict[str, Any]] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A camelCase merge patch of `.status`, validated by `model`; a None value clears that field.

    `conditions` are already in wire form (see `conditions.set_condition`); they are validated too.
    """
    data = model.model_validate(fields).model_dump(mode="json", exclude_unset=True)
    out = to_k8s_keys(model, data)
    if conditions is not None:
        for condition in conditions:
            Condition.model_validate(from_k8s_keys(Condition, condition))
        out["conditions"] = conditions
    return out
