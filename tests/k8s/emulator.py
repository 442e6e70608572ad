"""kmock's KubernetesEmulator with the API-server behaviour kopf and our operator rely on.

kmock 0.8 keeps objects in memory but leaves out what a real API server does on its own: it sets no
`metadata.resourceVersion` (kopf waits for it to detect its own changes), answers a failed JSON-patch
`test` with 500 instead of 422 Unprocessable Entity (kopf retries only on 422), ignores
`labelSelector`, keeps a Secret's `stringData` as is, never bumps `metadata.generation`, writes
status through the main resource, and has no garbage collector for ownerReferences. This subclass
adds exactly those, plus `refuse()` to play a ResourceQuota or an admission webhook that turns a
create down, and server-side table printing of the CRDs' columns for `kubectl get` (tables.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import uuid
from pathlib import Path
from typing import Any

import jsonpatch
import kmock
import yaml
from kmock._internal import enums, k8s, references, rendering

from . import tables

# Kinds with a status subresource: writes to the main resource leave .status alone, and vice versa.
STATUS_SUBRESOURCE = {"deployments", "jobs", "pods", "services", "persistentvolumeclaims", "federations", "siteclients"}
# Built-in resources the operator reads or writes (the emulator knows nothing it is not told).
BUILTINS = {
    "v1/secrets": ("Secret", True),
    "v1/configmaps": ("ConfigMap", True),
    "v1/services": ("Service", True),
    "v1/persistentvolumeclaims": ("PersistentVolumeClaim", True),
    "v1/pods": ("Pod", True),
    "v1/events": ("Event", True),
    "v1/namespaces": ("Namespace", False),
    "apps/v1/deployments": ("Deployment", True),
    "batch/v1/jobs": ("Job", True),
    "policy/v1/poddisruptionbudgets": ("PodDisruptionBudget", True),
}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _matches(labels: dict[str, str], selector: str) -> bool:
    """Equality, inequality and existence selectors (`a=b,c!=d,e,!f`)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class GeofedEmulator(kmock.KubernetesEmulator):
    """KubernetesEmulator plus resourceVersion, generation, 422 on failed tests, selectors, status, GC."""

    _versions = itertools.count(1)

    def declare_builtins(self) -> None:
        """Register the built-in resources the operator uses (for discovery and listing)."""
        for key, (kind, namespaced) in BUILTINS.items():
            verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
            subresources = {"status"} if key.rsplit("/", 1)[-1] in STATUS_SUBRESOURCE else set()
            self.resources[key] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, verbs=verbs, subresources=subresources
            )

    def declare_crds(self, crd_dir: Path) -> None:
        """Register the custom resources from CRD files (kmock does not do it when a CRD is posted)."""
        for path in sorted(crd_dir.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("additionalPrinterColumns"):
                    columns = self.__dict__.setdefault("_columns", {})
                    columns[spec["names"]["plural"]] = version["additionalPrinterColumns"]
                self.resources[f"{spec['group']}/{version['name']}/{spec['names']['plural']}"] = kmock.ResourceInfo(
                    kind=spec["names"]["kind"],
                    singular=spec["names"]["singular"],
                    namespaced=spec["scope"] == "Namespaced",
                    shortnames=set(spec["names"].get("shortNames", [])),
                    categories=set(spec["names"].get("categories", [])),
                    verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
                    subresources=set(version.get("subresources", {})),
                )

    def _find(self, request: rendering.Request) -> Any:
        key = (request.resource, request.namespace, request.name)
        obj = self._objects[key] if key in self._objects else None
        return None if obj is None or obj.deleted else obj

    def _prepare(self, request: rendering.Request) -> None:
        """Stamp what an API server stamps, before kmock stores the request's object or patch."""
        assert request.resource is not None
        version = str(next(self._versions))
        plural = request.resource.plural
        if plural == "secrets" and isinstance(request.data, dict) and "stringData" in request.data:
            data = request.data.setdefault("data", {})  # what the API server does with stringData
            for key, value in (request.data.pop("stringData") or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            meta.update(resourceVersion=version, uid=str(uuid.uuid4()), creationTimestamp=_now())
            meta.setdefault("generation", 1)
            if request.namespace:
                meta.setdefault("namespace", request.namespace)
            if plural in STATUS_SUBRESOURCE:
                request.data.pop("status", None)
        elif request.action == enums.action.UPDATE:
            current = self._find(request)
            spec_changed = False
            if isinstance(request.data, list):  # JSON patch: kopf's finalizers and progress
                request.data.append({"op": "add", "path": "/metadata/resourceVersion", "value": version})
                spec_changed = any(str(op.get("path", "")).startswith("/spec") for op in request.data)
            elif isinstance(request.data, dict):  # merge patch or server-side apply
                if request.subresource == "status":
                    for key in [k for k in request.data if k not in ("status", "metadata")]:
                        del request.data[key]
                elif plural in STATUS_SUBRESOURCE:
                    request.data.pop("status", None)
                if "spec" in request.data and current is not None:
                    merged = jsonpatch.JsonPatch.from_diff(current.get("spec") or {}, request.data["spec"] or {})
                    spec_changed = any(op["op"] != "remove" for op in merged)  # merge patches only add/replace
                request.data.setdefault("metadata", {})["resourceVersion"] = version
            if spec_changed and current is not None and request.subresource != "status":
                generation = int((current.get("metadata") or {}).get("generation", 1)) + 1
                if isinstance(request.data, list):
                    request.data.append({"op": "add", "path": "/metadata/generation", "value": generation})
                else:
                    request.data["metadata"]["generation"] = generation

    def refuse(self, plural: str, message: str) -> None:
        """Refuse every create of `plural` with 403, as a ResourceQuota or an admission webhook would."""
        self.__dict__.setdefault("_refusals", {})[plural] = message

    def allow(self, plural: str) -> None:
        """Stop refusing `plural`."""
        self.__dict__.setdefault("_refusals", {}).pop(plural, None)

    async def _handle(self, request: rendering.Request) -> Any:
        refusals = self.__dict__.get("_refusals", {})
        if request.resource is not None and request.action == enums.action.CREATE:
            if request.resource.plural in refusals:
                raise k8s.KubernetesError(status=403, reason="Forbidden", message=refusals[request.resource.plural])
        if request.resource is not None and request.action in (enums.action.CREATE, enums.action.UPDATE):
            self._prepare(request)
        try:
            response = await super()._handle(request)
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as exc:
            raise k8s.KubernetesError(status=422, reason="Invalid", message=f"the patch test failed: {exc}") from None
        if request.resource is not None and request.action in (
            enums.action.DELETE,
            enums.action.UPDATE,
            enums.action.CREATE,
        ):
            await self._collect_garbage()  # a delete, the last finalizer gone, a child of a gone owner
        return response

    async def _serve_list(self, request: rendering.Request) -> Any:
        payload = await super()._serve_list(request)
        selector = request.params.get("labelSelector")
        if selector:
            payload["items"] = [
                o for o in payload["items"] if _matches((o.get("metadata") or {}).get("labels") or {}, selector)
            ]
        return self._as_table(request, payload["items"]) or payload

    async def _serve_fetch(self, request: rendering.Request) -> Any:
        payload = await super()._serve_fetch(request)
        return self._as_table(request, [payload]) or payload

    def _as_table(self, request: rendering.Request, items: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Server-side printing for `kubectl get` (custom resources with printer columns only)."""
        columns = self.__dict__.get("_columns", {}).get(request.resource.plural if request.resource else None)
        if columns is None or "as=Table" not in request.headers.get("Accept", ""):
            return None
        return tables.table(items, columns)

    async def _collect_garbage(self) -> None:
        """Delete (or mark for deletion, if finalized) objects whose owners are all gone, repeatedly."""
        while True:
            alive = {(obj.get("metadata") or {}).get("uid") for obj in self._objects.values() if not obj.deleted}
            orphans = []
            for (resource, _namespace, _name), obj in list(self._objects.items()):
                if obj.deleted or (obj.get("metadata") or {}).get("deletionTimestamp"):
                    continue
                refs = (obj.get("metadata") or {}).get("ownerReferences") or []
                if refs and not any(ref.get("uid") in alive for ref in refs):
                    orphans.append((resource, obj))
            if not orphans:
                return
            for resource, obj in orphans:
                await self._delete_object(resource, obj)

    async def _delete_object(self, resource: references.resource, obj: Any) -> None:
        async with self._lock:
            meta = obj.get("metadata") or {}
            if meta.get("finalizers"):
                if not meta.get("deletionTimestamp"):
                    obj.patch({"metadata": {"deletionTimestamp": _now(), "resourceVersion": str(next(self._versions))}})
                    await self._buses[resource].put({"type": "MODIFIED", "object": obj.raw})
                return
            raw = obj.raw
            obj.delete()
            await self._buses[resource].put({"type": "DELETED", "object": raw})
