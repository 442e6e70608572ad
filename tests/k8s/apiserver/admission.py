"""Admission plugins: NamespaceLifecycle, OwnerReferencesPermissionEnforcement, LimitRanger (`limit_range.py`),
the pod security policies of `pod_security.py` (Pod Security `restricted`, OpenShift's UID ranges) and
ResourceQuota (object counts and pod compute resources, `compute_quota.py`).

NamespaceLifecycle refuses creates in a namespace that does not exist (404) or is terminating (403).
OwnerReferencesPermissionEnforcement: changing an object's ownerReferences on update needs `delete`
on the object; setting `blockOwnerDeletion: true` on a reference (on create or update) needs `update`
on the owner's `finalizers` subresource.

A pod create runs as the API server orders it: the mutating plugins (LimitRanger's defaults, then the
SCC), the pod's resource validation (a request above its limit is 422 Invalid, `pod_resources.py`),
the validating plugins (LimitRanger's min/max/ratio, Pod Security), then ResourceQuota. A LimitRange
is defaulted on write (`max` -> `default` -> `defaultRequest`, `min` -> `defaultRequest`).

ResourceQuota, on creates: object counts (`count/<resource>[.<group>]` over every stored object, the
legacy `secrets`, `configmaps`, `services`, `persistentvolumeclaims`, `resourcequotas`), and for pods
`pods`, `cpu`/`memory` (requests), `requests.cpu`, `requests.memory`, `limits.cpu`, `limits.memory`,
the ephemeral-storage and hugepages keys and `requests.<extended resource>`, over the namespace's
pods that are not terminal (Succeeded/Failed) and not being deleted; a pod's usage is its containers'
sum, or an init container's when larger (`pod_resources.pod_totals`). A quota on cpu or memory
refuses a pod with a container that does not name it (`failed quota: <name>: must specify ...`);
quota scopes Terminating, NotTerminating, BestEffort, NotBestEffort and PriorityClass select pods.

What a real cluster still does differently: it reads `status.hard`/`status.used`, which the quota
controller keeps (here `spec.hard` and a fresh count on each create, so a new quota applies at once
and there is no `status unknown for quota` refusal); it charges a deleting pod until its grace period
ends (here not once it is deleting); it also evaluates quotas on updates (pod resize, a service's type
change), `requests.storage` and per-StorageClass keys of claims, `services.loadbalancers`/`nodeports`,
CrossNamespacePodAffinity scopes, pod-level resources and pod overhead, and the admission
configuration's limited resources. LimitRanger's PersistentVolumeClaim items and the validation of a
LimitRange's own values (min <= defaultRequest <= default <= max) are not modelled, nor is the Pod
defaulting that copies a limit into a missing request written into the stored pod (it is applied when
resources are read). Quantities compare exactly where the API server rounds to milli-units.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import compute_quota, errors, limit_range, pod_resources, pod_security, rbac
from .quantities import Quantity, parse_list
from .registry import ResourceType

if TYPE_CHECKING:
    from .server import GeofedEmulator

LEGACY_COUNTS = {"secrets", "configmaps", "services", "persistentvolumeclaims", "resourcequotas"}


def admit(
    server: GeofedEmulator,
    user: rbac.User,
    rtype: ResourceType,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    operation: str,
    subresource: str | None,
) -> None:
    if operation == "create":
        namespace_lifecycle(server, rtype, obj)
    if subresource is None:
        owner_references(server, user, rtype, obj, old, operation)
    if rtype.plural == "limitranges" and not rtype.group and subresource is None:
        limit_range.set_defaults(obj)
    if operation == "create" and rtype.plural == "pods" and not rtype.group:
        admit_pod(server, obj)
    if operation == "create":
        quota(server, rtype, obj)


def admit_pod(server: GeofedEmulator, pod: dict[str, Any]) -> None:
    """A pod create's mutating plugins (LimitRanger, then the SCC), the pod's resource validation (422),
    then the validating ones (LimitRanger, Pod Security); ResourceQuota follows in `admit`."""
    ns_type = server.registry.get("", "v1", "namespaces")
    namespace = server.get_object(ns_type, None, pod["metadata"]["namespace"]) if ns_type else None
    ranges = limit_range.ranges(server, pod["metadata"]["namespace"])
    limit_range.mutate(pod, ranges)
    pod_security.mutate(pod, namespace or {})
    problems = pod_resources.validate(pod)
    if problems:
        raise errors.invalid("Pod", "", pod["metadata"].get("name", ""), problems)
    limit_range.validate(pod, ranges)
    pod_security.enforce(pod, namespace or {})


def namespace_lifecycle(server: GeofedEmulator, rtype: ResourceType, obj: dict[str, Any]) -> None:
    if not rtype.namespaced:
        return
    ns_type = server.registry.get("", "v1", "namespaces")
    name = obj["metadata"].get("namespace")
    namespace = server.get_object(ns_type, None, name) if ns_type else None
    if namespace is None:
        raise errors.not_found("namespaces", "", name)
    if namespace["metadata"].get("deletionTimestamp"):
        why = f"unable to create new content in namespace {name} because it is being terminated"
        subject = f'{errors.qualified(rtype.plural, rtype.group)} "{obj["metadata"]["name"]}"'
        cause = {"reason": "NamespaceTerminating", "message": why, "field": "metadata.namespace"}
        details = {"name": obj["metadata"]["name"], "group": rtype.group, "kind": rtype.plural, "causes": [cause]}
        raise errors.status_error(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def _refs(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(((obj or {}).get("metadata") or {}).get("ownerReferences") or [])


def owner_references(
    server: GeofedEmulator,
    user: rbac.User,
    rtype: ResourceType,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    operation: str,
) -> None:
    new_refs, old_refs = _refs(obj), _refs(old)
    if new_refs == old_refs:
        return
    md = obj["metadata"]
    ns = md.get("namespace") if rtype.namespaced else None
    if operation != "create" and not rbac.allowed(server, user, "delete", rtype.group, rtype.plural, ns, md["name"]):
        why = "cannot set an ownerRef on a resource you can't delete: , <nil>"
        raise errors.forbidden(rtype.plural, rtype.group, md["name"], why)
    blocking_before = {r.get("uid") for r in old_refs if r.get("blockOwnerDeletion")}
    for ref in new_refs:
        if not ref.get("blockOwnerDeletion") or ref.get("uid") in blocking_before:
            continue
        owner_type = server.registry.by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if owner_type is None:
            why = (f"cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion "
                   f"{ref.get('apiVersion')} Kind {ref.get('kind')}: no matches for kind \"{ref.get('kind')}\" "
                   f"in version \"{ref.get('apiVersion')}\"")  # fmt: skip
            raise errors.forbidden(rtype.plural, rtype.group, md["name"], why)
        owner_ns = ns if owner_type.namespaced else None
        if not rbac.allowed(server, user, "update", owner_type.group, f"{owner_type.plural}/finalizers", owner_ns,
                            ref.get("name")):  # fmt: skip
            why = (
                "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: "
                ", <nil>"
            )
            raise errors.forbidden(rtype.plural, rtype.group, md["name"], why)


def _counted_keys(rtype: ResourceType) -> set[str]:
    keys = {f"count/{rtype.plural}" + (f".{rtype.group}" if rtype.group else "")}
    if not rtype.group and rtype.plural in LEGACY_COUNTS:
        keys.add(rtype.plural)
    return keys


def _live(obj: dict[str, Any]) -> bool:
    """A pod the quota still charges for `pods` and compute: not terminal, not being deleted."""
    return (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not obj["metadata"].get(
        "deletionTimestamp"
    )


def _usage(rtype: ResourceType, obj: dict[str, Any], is_pod: bool) -> dict[str, Quantity]:
    """What one object charges: 1 of each count (all stored objects), and a live pod's compute usage."""
    out = {key: Quantity.parse(1) for key in _counted_keys(rtype)}
    if is_pod and _live(obj):
        out.update(compute_quota.pod_usage(obj))
    return out


def _pretty(values: dict[str, Quantity], keys: list[str]) -> str:
    return ",".join(f"{k}={values[k]}" for k in keys)


def quota(server: GeofedEmulator, rtype: ResourceType, obj: dict[str, Any]) -> None:
    """ResourceQuota on create: every matching quota's constraints first, then each quota's hard limits
    against the namespace's usage plus this object's, as plugin/pkg/admission/resourcequota/controller.go's
    checkRequest does (`failed quota: %s: %v`, `exceeded quota: %s, requested: %s, used: %s, limited: %s`,
    each list `prettyPrint`ed: sorted `name=quantity`, comma-joined)."""
    quota_type = server.registry.get("", "v1", "resourcequotas")
    ns = obj["metadata"].get("namespace")
    if quota_type is None or not rtype.namespaced:
        return
    is_pod = rtype.plural == "pods" and not rtype.group
    quotas = [q for q in server.list_objects(quota_type, ns) if compute_quota.matches(q, obj, is_pod)]
    name = obj["metadata"]["name"]
    for quota_obj in quotas if is_pod else ():
        hard = (quota_obj.get("spec") or {}).get("hard") or {}
        problem = compute_quota.constraints(obj, {k: v for k, v in hard.items() if k in compute_quota.matching(hard)})
        if problem:
            raise errors.forbidden(rtype.plural, rtype.group, name, f"failed quota: {quota_obj['metadata']['name']}: "
                                   f"{problem}")  # fmt: skip
    requested = _usage(rtype, obj, is_pod)
    stored: list[dict[str, Any]] | None = None
    for quota_obj in quotas:
        hard = parse_list((quota_obj.get("spec") or {}).get("hard"))
        keys = sorted(set(requested) & set(hard))
        if not keys:
            continue
        stored = list(server.list_objects(rtype, ns)) if stored is None else stored
        used = {key: Quantity.parse(0) for key in keys}
        for other in (o for o in stored if compute_quota.matches(quota_obj, o, is_pod)):
            for key, value in _usage(rtype, other, is_pod).items():
                if key in used:
                    used[key] = used[key] + value if used[key].value else value
        exceeded = [k for k in keys if used[k].value + requested[k].value > hard[k].value]
        if exceeded:
            why = (f"exceeded quota: {quota_obj['metadata']['name']}, requested: {_pretty(requested, exceeded)}, "
                   f"used: {_pretty(used, exceeded)}, limited: {_pretty(hard, exceeded)}")  # fmt: skip
            raise errors.forbidden(rtype.plural, rtype.group, name, why)
