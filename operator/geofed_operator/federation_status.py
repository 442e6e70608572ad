"""Status reducers of a Federation: PS admin status + Deployment state -> `.status` patch.

Pure functions; the kopf timer in `handlers/federation.py` feeds them what it observed.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from geofed.contribution_summary import from_client_list, site_summary
from geofed_operator.conditions import set_conditions
from geofed_operator.status_models import FederationStatus, status_patch


def deployment_ready(deployment: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(ready, why not): the rolled-out pod of the current template passes its readiness probe."""
    if deployment is None:
        return False, "the PS Deployment does not exist yet"
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    generation = (deployment.get("metadata") or {}).get("generation")
    if generation is not None and status.get("observedGeneration", 0) < generation:
        return False, "the PS Deployment's new spec is not rolled out yet"
    want = spec.get("replicas", 1)
    updated, ready = status.get("updatedReplicas", 0), status.get("readyReplicas", 0)
    if updated < want or ready < want:
        return False, f"waiting for the PS pod: {ready}/{want} ready, {updated}/{want} updated"
    return True, ""


def _loss(value: Any) -> float | None:
    """Loss as reported, or None when no client reported one yet (proto default 0.0) or it is not finite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and value != 0.0 else None


def site_contributions(clients: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`status.sites` from the PS's client list (`AdminClient.list_clients()`)."""
    return [
        {
            "site": s["site"],
            "clients": s["clients"],
            "tokens_trained": int(s["tokens"]),
            "update_mass": float(s["mass"]),
            "share_window": round(min(1.0, s["share_window"]), 6),
            "share_run": round(min(1.0, s["share_run"]), 6),
            "compute_seconds": round(float(s["compute_s"]), 3),
        }
        for s in site_summary(from_client_list(clients))
    ]


def privacy_status(ps: Mapping[str, Any]) -> dict[str, Any]:
    """`status.privacy` from a PS status's privacy fields (`privacy_*`)."""
    budget = float(ps.get("privacy_budget") or 0.0)
    return {"mode": str(ps["privacy_mode"]), "epsilon": float(ps.get("privacy_epsilon", 0.0)),
            "delta": float(ps.get("privacy_delta", 0.0)), "budget": budget or None,
            "versions": int(ps.get("privacy_versions", 0)), "spent": bool(ps.get("privacy_spent", False)),
            "clip_norm": float(ps.get("privacy_clip_norm", 0.0)),
            "noise_multiplier": float(ps.get("privacy_noise_multiplier", 0.0))}


def federation_status_from_ps(
    ps: Mapping[str, Any],
    *,
    clients: Sequence[Mapping[str, Any]] | None = None,
    now: dt.datetime,
    generation: int | None,
    conditions: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """Status patch for a serving PS (keys of `AdminClient.status()`)."""
    has_model = bool(ps.get("has_model"))
    ready_message = (
        f"PS serving version {ps.get('version', 0)} to {ps.get('connected_clients', 0)} connected clients"
        if has_model
        else "PS serving; waiting for the master client to upload the initial model"
    )
    return status_patch(
        FederationStatus,
        phase="Running",
        version=int(ps.get("version", 0)),
        connected_clients=int(ps.get("connected_clients", 0)),
        known_clients=int(ps.get("known_clients", 0)),
        mode=str(ps.get("mode", "")) or None,
        buffered_deltas=int(ps.get("buffered_deltas", 0)),
        train_loss=_loss(ps.get("last_train_loss")),
        eval_loss=_loss(ps.get("last_eval_loss")),
        has_model=has_model,
        num_parameters=int(ps.get("num_parameters", 0)),
        server_instance=str(ps.get("server_instance", "")) or None,
        **({"sites": site_contributions(clients)} if clients is not None else {}),
        **({"privacy": privacy_status(ps)} if ps.get("privacy_mode") else {}),
        conditions=set_conditions(
            conditions,
            {
                # Not Ready before the model exists: a client that joins now can only wait for it.
                "Ready": (has_model, "Serving" if has_model else "WaitingForModel", ready_message),
                "Progressing": (False, "RolledOut", "the PS runs the current spec"),
                "Degraded": (False, "Healthy", ""),
            },
            now=now,
            generation=generation,
        ),
    )


def group_entry(name: str, address: str, ps: Mapping[str, Any], public: str | None = None) -> dict[str, Any]:
    """One `status.groups` entry from a group's PS status (`AdminClient.status()`)."""
    return {
        "name": name,
        "ps_address": address,
        **({"public_address": public} if public else {}),
        "version": int(ps.get("version", 0)),
        "has_model": bool(ps.get("has_model")),
        "connected_clients": int(ps.get("connected_clients", 0)),
        "ring_allreduces": int(ps.get("ring_allreduces", 0)),
        "ring_members": sorted(str(m) for m in ps.get("ring_members") or []),
    }


def excluded_groups(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """Groups every other group's PS has left out of its ring (a stalled, excluded or rejoining PS).

    A PS that has not rung yet lists no members and has no say; a PS the others keep is not excluded
    because its own view is stale (its ring listing only itself says nothing about them).
    """
    out = []
    for group in groups:
        views = [g["ring_members"] for g in groups if g["name"] != group["name"] and g["ring_members"]]
        if views and all(group["name"] not in members for members in views):
            out.append(group["name"])
    return out


def federation_status_from_groups(
    groups: Sequence[tuple[str, str, Mapping[str, Any], str | None]],
    *,
    clients: Sequence[Mapping[str, Any]] | None = None,
    now: dt.datetime,
    generation: int | None,
    conditions: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """Status patch for a multi-PS federation from each group's (name, address, PS status, public address).

    The top-level fields describe the federation as a whole: `version` is the lowest group version
    (every PS has reached it), client counts are summed; `groups` holds each PS's own view.
    """
    entries = [group_entry(*group) for group in groups]
    first = dict(groups[0][2])
    first["version"] = min(e["version"] for e in entries)
    first["has_model"] = all(e["has_model"] for e in entries)
    first["connected_clients"] = sum(e["connected_clients"] for e in entries)
    first["known_clients"] = sum(int(g[2].get("known_clients", 0)) for g in groups)
    first["buffered_deltas"] = sum(int(g[2].get("buffered_deltas", 0)) for g in groups)
    patch = federation_status_from_ps(first, clients=clients, now=now, generation=generation, conditions=conditions)
    extra = status_patch(
        FederationStatus,
        groups=entries,
        group_versions=",".join(f"{e['name']}={e['version']}" for e in entries),
    )
    excluded = excluded_groups(entries)
    if excluded:
        message = (
            f"PS group(s) {', '.join(excluded)} are out of the other PSs' ring (stalled, excluded or rejoining); "
            "their clients train on a model the others do not share until they resync"
        )
        degraded = federation_status_degraded("RingMemberExcluded", message, now=now, generation=generation,
                                              conditions=patch["conditions"])  # fmt: skip
        patch.update(phase=degraded["phase"], conditions=degraded["conditions"])
    return {**patch, **extra}


def federation_status_not_ready(
    message: str,
    *,
    now: dt.datetime,
    generation: int | None,
    conditions: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """Status patch while the PS Deployment is rolling out (not an error)."""
    return status_patch(
        FederationStatus,
        phase="Progressing",
        conditions=set_conditions(
            conditions,
            {"Ready": (False, "RollingOut", message), "Progressing": (True, "RollingOut", message)},
            now=now,
            generation=generation,
        ),
    )


def federation_status_degraded(
    reason: str,
    message: str,
    *,
    now: dt.datetime,
    generation: int | None,
    conditions: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """Status patch when the PS is unreachable, refuses the admin credential, the spec is invalid, or its pod
    cannot run (refused, unschedulable, image not pulled, crash loop, checkpoint claim pending)."""
    return status_patch(
        FederationStatus,
        phase="Degraded",
        conditions=set_conditions(
            conditions,
            {"Ready": (False, reason, message), "Degraded": (True, reason, message)},
            now=now,
            generation=generation,
        ),
    )
