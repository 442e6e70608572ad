"""Admission plugins: NamespaceLifecycle, OwnerReferencesPermissionEnforcement, the pod security policies of
`pod_security.py` (Pod Security `restricted`, OpenShift's UID ranges) and ResourceQuota (object counts).

NamespaceLifecycle refuses creates in a namespace that does not exist (404) or is terminating (403).
OwnerReferencesPermissionEnforcement: changing an object's ownerReferences on update needs `delete`
on the object; setting `blockOwnerDeletion: true` on a reference (on create or update) needs `update`
on the owner's `finalizers` subresource. ResourceQuota counts objects only: `pods` (not terminal),
`count/<resource>[.<group>]` and the legacy `secrets`, `configmaps`, `services`,
`persistentvolumeclaims`; compute quotas (`requests.cpu`, ...) are not evaluated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors, pod_security, rbac
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
    if operation == "create" and rtype.plural == "pods" and not rtype.group:
        ns_type = server.registry.get("", "v1", "namespaces")
        namespace = server.get_object(ns_type, None, obj["metadata"]["namespace"]) if ns_type else None
        pod_security.admit_pod(obj, namespace or {})
    if operation == "create":
        quota(server, rtype, obj)


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
    if not rtype.group and rtype.plural == "pods":
        keys.add("pods")
    return keys


def _live(rtype: ResourceType, obj: dict[str, Any]) -> bool:
    if rtype.plural == "pods":
        return (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not obj["metadata"].get(
            "deletionTimestamp"
        )
    return True


def quota(server: GeofedEmulator, rtype: ResourceType, obj: dict[str, Any]) -> None:
    quota_type = server.registry.get("", "v1", "resourcequotas")
    ns = obj["metadata"].get("namespace")
    if quota_type is None or not rtype.namespaced:
        return
    keys = _counted_keys(rtype)
    for quota_obj in server.list_objects(quota_type, ns):
        hard = (quota_obj.get("spec") or {}).get("hard") or {}
        for key in sorted(keys & set(hard)):
            used = sum(1 for o in server.list_objects(rtype, ns) if _live(rtype, o))
            limit = int(str(hard[key]))
            if used + 1 > limit:
                why = (f"exceeded quota: {quota_obj['metadata']['name']}, requested: {key}=1, used: {key}={used}, "
                       f"limited: {key}={limit}")  # fmt: skip
                raise errors.forbidden(rtype.plural, rtype.group, obj["metadata"]["name"], why)
