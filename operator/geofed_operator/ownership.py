"""Which existing objects the operator may take over by name: only its own children.

A child is the operator's when it carries an ownerReference to the custom resource it is built for
(`kopf.adopt` puts one on every child), or the operator's labels for that resource and no controller
but that resource (a checkpoint PVC kept by `retainOnDelete`, built without an ownerReference).
Anything else of the same name (a user's Deployment, another controller's Secret) is left untouched
and reported by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from geofed_operator import names

# Kinds checked before they are changed or used; a ConfigMap or PodDisruptionBudget is applied without the
# check, as the operator's RBAC grants no get on them.
CHECKED_KINDS = frozenset({"Secret", "Service", "PersistentVolumeClaim", "Deployment", "Job"})
# Labels that name the operator's child: who made it, for which resource, as which part.
_OWN_LABELS = (names.LABEL_MANAGED_BY, names.LABEL_INSTANCE, names.LABEL_NAME)


class ForeignObject(Exception):
    """An object of a child's name exists that the operator did not create for this resource."""


def foreign_reason(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> str | None:
    """Why `existing` is not the operator's `wanted` child (None: it is, and may be changed)."""
    meta = existing.get("metadata") or {}
    want = wanted["metadata"]
    refs = meta.get("ownerReferences") or []
    owners = want.get("ownerReferences") or []
    if {r.get("uid") for r in refs} & {r.get("uid") for r in owners}:
        return None
    labels, want_labels = meta.get("labels") or {}, want.get("labels") or {}
    controller = next((r for r in refs if r.get("controller")), None)
    labelled = want_labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY and all(
        labels.get(k) == want_labels.get(k) for k in _OWN_LABELS
    )
    # A child built without an ownerReference (a retained PVC) may still be held by its resource.
    held = controller is None or (
        not owners
        and str(controller.get("apiVersion", "")).startswith(f"{names.GROUP}/")
        and controller.get("name") == want_labels.get(names.LABEL_INSTANCE)
    )
    if labelled and held:
        return None
    what = f"{wanted['kind']} {want['name']!r}"
    parent = f"{owners[0]['kind']} {owners[0]['name']!r}" if owners else f"{want_labels.get(names.LABEL_INSTANCE)!r}"
    if controller is None:
        return (
            f"{what} exists and was not created by the geofed operator for {parent} (no ownerReference to it, and "
            f"not the labels {names.LABEL_MANAGED_BY}={names.MANAGED_BY}, {names.LABEL_INSTANCE}="
            f"{want_labels.get(names.LABEL_INSTANCE)}): it is left as it is; rename or delete it"
        )
    by = f"{controller.get('kind')} {controller.get('name')!r}"
    if owners and (controller.get("kind"), controller.get("name")) == (owners[0]["kind"], owners[0]["name"]):
        return f"{what} still belongs to an earlier {by} of the same name: waiting for the garbage collector"
    return f"{what} exists and belongs to {by}, not to {parent}: it is left as it is; rename or delete it"


def check_owned(existing: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> None:
    """Raise ForeignObject if an existing object of `wanted`'s name is not the operator's child."""
    if existing is None or wanted["kind"] not in CHECKED_KINDS:
        return
    reason = foreign_reason(existing, wanted)
    if reason is not None:
        raise ForeignObject(reason)


def apply_owned(kube: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply of a child, unless an object of its name exists that is not the operator's."""
    if obj["kind"] in CHECKED_KINDS:
        meta = obj["metadata"]
        check_owned(kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]), obj)
    return kube.apply(obj)


def ensure_owned(kube: Any, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Create a child unless it exists; an existing one is returned only if it is the operator's."""
    live, created = kube.ensure(obj)
    if not created:
        check_owned(live, obj)
    return live, created
