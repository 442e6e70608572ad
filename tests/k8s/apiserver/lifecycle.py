"""Object life cycle: what the API server and its controllers do around creation and deletion.

Deletion: an object with finalizers (or deleted with `propagationPolicy` Foreground or Orphan, which
add the `foregroundDeletion` or `orphan` finalizer) only gets `deletionTimestamp` and
`deletionGracePeriodSeconds: 0`; it is removed when its last finalizer is. No finalizer can be added
once `deletionTimestamp` is set. A Pod is deleted gracefully: `deletionTimestamp` is now plus the grace
period (the request's `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`, else 30)
and the Pod stays until a DELETE with `gracePeriodSeconds=0` (the kubelet's, once the containers are
gone); a Pod not bound to a node (`spec.nodeName` empty) or already Succeeded/Failed goes at once.
batch/v1 Jobs orphan their Pods unless the request says otherwise, as on a real server.

The garbage collector deletes (background propagation) dependents whose owners are all gone, deletes
a foreground-deleted owner's dependents before its `foregroundDeletion` finalizer is removed, and
strips the owner reference from an orphan-deleted owner's dependents. The namespace controller deletes
everything in a terminating namespace, then removes the `kubernetes` finalizer and the namespace.
Deleting a CustomResourceDefinition deletes its custom resources (waiting for their finalizers), then
the CRD, which stops serving its types. All of this runs synchronously after each write (see `settle`).
"""

from __future__ import annotations

import base64
import copy
from typing import TYPE_CHECKING, Any

from . import errors
from .errors import FieldError
from .registry import ResourceType
from .store import now

if TYPE_CHECKING:
    from .server import GeofedEmulator

CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
SERVER_FIELDS = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                 "namespace", "name", "selfLink")  # fmt: skip


def on_create(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """The API server's create-time defaults for the built-in kinds here; status dropped where it is a subresource."""
    if "status" in rtype.subresources and rtype.plural != "namespaces":
        obj.pop("status", None)
    if rtype.plural == "secrets":
        obj.setdefault("type", "Opaque")
    elif rtype.plural in ("pods", "persistentvolumeclaims"):
        obj["status"] = {"phase": "Pending"}
    elif rtype.plural == "namespaces":
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        obj["status"] = {"phase": "Active"}
    elif rtype.plural == "customresourcedefinitions":
        md = obj["metadata"]
        if CRD_CLEANUP not in (md.get("finalizers") or []):
            md["finalizers"] = [*(md.get("finalizers") or []), CRD_CLEANUP]
        stamp = md["creationTimestamp"]
        accepted = (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))
        conditions = [
            {"type": t, "status": "True", "reason": r, "message": "", "lastTransitionTime": stamp} for t, r in accepted
        ]
        stored = [v["name"] for v in obj["spec"]["versions"] if v.get("storage")]
        obj["status"] = {"acceptedNames": obj["spec"]["names"], "conditions": conditions, "storedVersions": stored}


def fold_string_data(secret: dict[str, Any]) -> None:
    """A Secret's `stringData` is merged into `data` (base64) and not stored, as the API server does."""
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {}) or {}
        secret["data"] = data
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def keep_server_fields(
    rtype: ResourceType, obj: dict[str, Any], current: dict[str, Any], subresource: str | None
) -> None:
    """What an update cannot change: server-set metadata, status through the main resource, the rest through status."""
    md, old = obj.setdefault("metadata", {}), current["metadata"]
    for key in SERVER_FIELDS:
        if key in old:
            md[key] = old[key]
        else:
            md.pop(key, None)
    md["resourceVersion"] = old["resourceVersion"]
    if subresource == "status":
        status = obj.get("status")
        obj.clear()
        obj.update(copy.deepcopy(current))
        if status is None:
            obj.pop("status", None)
        else:
            obj["status"] = status
    elif "status" in rtype.subresources:
        if "status" in current:
            obj["status"] = copy.deepcopy(current["status"])
        else:
            obj.pop("status", None)
    if rtype.plural == "namespaces" and subresource != "status":
        obj["spec"] = copy.deepcopy(current.get("spec") or {})  # spec.finalizers changes through /finalize only


def check_finalizers(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    if old is None or not old["metadata"].get("deletionTimestamp"):
        return
    before = set(old["metadata"].get("finalizers") or [])
    added = [f for f in obj["metadata"].get("finalizers") or [] if f not in before]
    if added:
        shown = "[]string{" + ", ".join(f'"{f}"' for f in added) + "}"
        detail = f"no new finalizers can be added if the object is being deleted, found new finalizers {shown}"
        raise errors.invalid(rtype.kind, rtype.group, obj["metadata"]["name"],
                             [FieldError("metadata.finalizers", "Forbidden", detail)])  # fmt: skip


def bump_generation(obj: dict[str, Any], current: dict[str, Any]) -> None:
    """metadata.generation counts changes to anything but metadata and status."""
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    before = {k: v for k, v in current.items() if k not in ("metadata", "status")}
    generation = int(current["metadata"].get("generation") or 1)
    obj["metadata"]["generation"] = generation + 1 if body != before else generation


def _pod_grace(pod: dict[str, Any], options: dict[str, Any]) -> int:
    if not (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    requested = options.get("gracePeriodSeconds")
    if requested is not None:
        return max(int(requested), 0)
    configured = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return 30 if configured is None else int(configured)


def _default_policy(rtype: ResourceType) -> str:
    return "Orphan" if (rtype.group, rtype.version, rtype.plural) == ("batch", "v1", "jobs") else "Background"


def delete(
    server: GeofedEmulator, rtype: ResourceType, obj: dict[str, Any], options: dict[str, Any]
) -> tuple[Any, int]:
    """Delete (or mark for deletion) one object; (the response body, the HTTP status)."""
    md = obj["metadata"]
    pre = options.get("preconditions") or {}
    if pre.get("uid") and pre["uid"] != md.get("uid"):
        why = f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {md.get('uid')}"
        raise errors.conflict(rtype.plural, rtype.group, md["name"], why)
    if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
        why = (f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
               f"ResourceVersion in meta: {md.get('resourceVersion')}")  # fmt: skip
        raise errors.conflict(rtype.plural, rtype.group, md["name"], why)
    if options.get("dryRun"):
        return obj, 200
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    policy = policy or _default_policy(rtype)
    finalizers = list(md.get("finalizers") or [])
    if rtype.plural != "namespaces":
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        elif policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy != "Orphan" and "orphan" in finalizers and not md.get("deletionTimestamp"):
            finalizers.remove("orphan")
    grace = _pod_grace(obj, options) if rtype.plural == "pods" else 0
    if md.get("deletionTimestamp"):
        changed = finalizers != list(md.get("finalizers") or [])
        if rtype.plural == "pods" and grace < int(md.get("deletionGracePeriodSeconds") or 0):
            md["deletionTimestamp"], md["deletionGracePeriodSeconds"] = now(grace), grace
            changed = True
        md["finalizers"] = finalizers
        if not finalizers and rtype.plural == "pods" and grace == 0:
            server.remove(rtype, md.get("namespace"), md["name"])
            return obj, 200
        if changed:
            server.replace(rtype, obj)
        return obj, 202
    if rtype.plural == "namespaces":
        md["deletionTimestamp"], md["deletionGracePeriodSeconds"] = now(), 0
        obj.setdefault("status", {})["phase"] = "Terminating"
        server.replace(rtype, obj)
        return obj, 202
    if finalizers or grace > 0:
        md["deletionTimestamp"], md["deletionGracePeriodSeconds"] = now(grace), grace
        if finalizers:
            md["finalizers"] = finalizers
        server.replace(rtype, obj)
        return obj, 202
    server.remove(rtype, md.get("namespace") if rtype.namespaced else None, md["name"])
    return obj, 200


def _removable(rtype: ResourceType, obj: dict[str, Any]) -> bool:
    md = obj["metadata"]
    if not md.get("deletionTimestamp") or md.get("finalizers"):
        return False
    if rtype.plural == "namespaces":
        return not (obj.get("spec") or {}).get("finalizers")
    return int(md.get("deletionGracePeriodSeconds") or 0) == 0


def _drop_finalizer(server: GeofedEmulator, rtype: ResourceType, obj: dict[str, Any], finalizer: str) -> None:
    obj["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
    server.replace(rtype, obj)


def _owner_uids(obj: dict[str, Any]) -> set[str]:
    return {r.get("uid") for r in obj["metadata"].get("ownerReferences") or []}


def _step(server: GeofedEmulator) -> bool:
    """One pass of the finalizer-released removals, the garbage collector and the namespace controller."""
    objects = server.all_objects()
    for rtype, obj in objects:
        if _removable(rtype, obj):
            md = obj["metadata"]
            server.remove(rtype, md.get("namespace") if rtype.namespaced else None, md["name"])
            return True
    alive = {obj["metadata"]["uid"]: (rtype, obj) for rtype, obj in objects}
    for rtype, obj in objects:
        md = obj["metadata"]
        refs = md.get("ownerReferences") or []
        if refs and not md.get("deletionTimestamp") and not any(r.get("uid") in alive for r in refs):
            delete(server, rtype, copy.deepcopy(obj), {"propagationPolicy": "Background"})
            return True
    for rtype, owner in objects:
        md = owner["metadata"]
        if not md.get("deletionTimestamp"):
            continue
        finalizers = md.get("finalizers") or []
        dependents = [(t, o) for t, o in objects if md["uid"] in _owner_uids(o)]
        if "orphan" in finalizers:
            for dtype, dependent in dependents:
                dependent = copy.deepcopy(dependent)
                dependent["metadata"]["ownerReferences"] = [
                    r for r in dependent["metadata"]["ownerReferences"] if r.get("uid") != md["uid"]
                ]
                server.replace(dtype, dependent)
            _drop_finalizer(server, rtype, copy.deepcopy(owner), "orphan")
            return True
        if "foregroundDeletion" in finalizers:
            pending = [(t, o) for t, o in dependents if not o["metadata"].get("deletionTimestamp")]
            for dtype, dependent in pending:
                delete(server, dtype, copy.deepcopy(dependent), {"propagationPolicy": "Foreground"})
            blocking = [
                o
                for _, o in dependents
                if any(
                    r.get("uid") == md["uid"] and r.get("blockOwnerDeletion") for r in o["metadata"]["ownerReferences"]
                )
            ]
            if not blocking:
                _drop_finalizer(server, rtype, copy.deepcopy(owner), "foregroundDeletion")
                return True
            if pending:
                return True
        if rtype.plural == "customresourcedefinitions" and CRD_CLEANUP in finalizers:
            served = {(t.group, t.plural) for t in server.registry.types.values() if t.crd is not None
                      and t.crd["metadata"]["name"] == md["name"]}  # fmt: skip
            instances = [(t, o) for t, o in objects if (t.group, t.plural) in served]
            fresh = [(t, o) for t, o in instances if not o["metadata"].get("deletionTimestamp")]
            for itype, instance in fresh:
                delete(server, itype, copy.deepcopy(instance), {"propagationPolicy": "Background"})
            if not instances:
                _drop_finalizer(server, rtype, copy.deepcopy(owner), CRD_CLEANUP)
                return True
            if fresh:
                return True
        if rtype.plural == "namespaces" and (owner.get("spec") or {}).get("finalizers"):
            inside = [(t, o) for t, o in objects if t.namespaced and o["metadata"].get("namespace") == md["name"]]
            fresh = [(t, o) for t, o in inside if not o["metadata"].get("deletionTimestamp")]
            for dtype, dependent in fresh:
                delete(server, dtype, copy.deepcopy(dependent), {"propagationPolicy": "Background"})
            if not inside:
                owner = copy.deepcopy(owner)
                owner["spec"]["finalizers"] = []
                server.replace(rtype, owner)
                return True
            if fresh:
                return True
    return False


def settle(server: GeofedEmulator) -> None:
    """Run the controllers until nothing changes."""
    for _ in range(10000):
        if not _step(server):
            return
    raise RuntimeError("the emulated controllers did not settle")


def finalize_namespace(server: GeofedEmulator, rtype: ResourceType, name: str, body: Any) -> dict[str, Any]:
    """PUT namespaces/<name>/finalize: set spec.finalizers (what the namespace controller calls)."""
    current = server.get_object(rtype, None, name)
    if current is None:
        raise errors.not_found(rtype.plural, rtype.group, name)
    current.setdefault("spec", {})["finalizers"] = list(((body or {}).get("spec") or {}).get("finalizers") or [])
    server.replace(rtype, current)
    settle(server)
    return current


async def create_subresource(server: GeofedEmulator, request: Any, info: Any, rtype: ResourceType, user: Any) -> Any:
    """POST to a subresource: serviceaccounts/<name>/token (TokenRequest), pods/<name>/eviction."""
    ns = info.namespace
    obj = server.get_object(rtype, ns, info.name)
    if obj is None:
        raise errors.not_found(rtype.plural, rtype.group, info.name)
    body = server._body(request, "application/json") or {}
    if info.subresource == "token":
        token = server.mint_token(ns, info.name)
        status = {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}
        return server._respond({**body, "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                "status": status}, 201)  # fmt: skip
    if info.subresource == "eviction":
        delete(server, rtype, obj, (body.get("deleteOptions") or {}))
        settle(server)
        return server._respond({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"}, 201)
    raise errors.status_error(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )
