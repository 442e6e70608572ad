"""The emulated API server: kmock's HTTP server and object store, with a kube-apiserver's request handling.

kmock records every request and keeps objects (`api.objects`); this class serves the resource API
itself, as a real API server would for what this project does: authentication by bearer token and
RBAC (rbac.py), schema pruning, defaulting and validation with CEL for custom resources (schema.py,
cel.py), metadata validation (meta.py), admission (admission.py: namespace lifecycle, owner-reference
permissions, object-count quotas), JSON/merge/strategic-merge patches and apply (patching.py),
resourceVersion preconditions, status subresources, watches from a resourceVersion, and deletion
with finalizers, graceful pod deletion, garbage collection and namespace deletion (lifecycle.py).

What a real API server does that this one does not:
- no protobuf, CBOR or YAML responses (JSON only), no chunked lists (`limit`/`continue` return everything),
  no bookmarks in watches, no watch cache expiry (`410 Gone`);
- built-in types get no defaulting beyond a Secret's `stringData` and `type`, a Pod's `phase` and a
  Namespace's `kubernetes` finalizer, and no type-specific validation beyond their OpenAPI schema
  (no immutable Job templates, no Service clusterIP allocation, no Pod spec update rules);
- server-side apply keeps the last applied configuration per field manager instead of managedFields,
  so it never reports conflicts with other managers;
- requests without an `Authorization` header are the test harness's own (cluster-admin) requests,
  where a real server would treat them as `system:anonymous`;
- the garbage collector and the namespace controller run synchronously after every write, not as
  eventually consistent controllers;
- no node or kubelet: a Pod deleted with a grace period stays until a DELETE with
  `gracePeriodSeconds=0` (as the kubelet sends) removes it; nothing force-deletes it when the grace runs out.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import yaml
from kmock._internal import k8s, references, rendering

from .. import tables
from . import admission, discovery, errors, lifecycle, meta, openapi, patching, paths, protobuf, rbac, registry, schema
from .errors import status_error
from .registry import ResourceType

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"


VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "emulated", "gitTreeState": "clean",
           "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3", "compiler": "gc",
           "platform": "linux/amd64"}  # fmt: skip


def now(offset: float = 0.0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


class GeofedEmulator(kmock.KubernetesEmulator):
    """A strict emulated kube-apiserver (see the module docstring for what it still does not do)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.registry = registry.Registry()
        self._rv = itertools.count(1)
        self.last_rv = 0
        self._log: list[tuple[int, str, dict[str, Any]]] = []  # (resourceVersion, type key, watch event)
        self._changed: asyncio.Condition | None = None
        self._applied: dict[tuple[str, str], Any] = {}  # (uid, field manager) -> last applied configuration
        self.auth = rbac.Authenticator(self)
        self.checks: list[rbac.Check] = []  # every authorization decision, in order
        self._refusals: dict[str, str] = {}

    # ---- declaration ---------------------------------------------------------------------------

    def _declare(self, rtype: ResourceType) -> None:
        self.registry.add(rtype)
        self.resources[rtype.key] = kmock.ResourceInfo(
            kind=rtype.kind, singular=rtype.singular or rtype.kind.lower(), namespaced=rtype.namespaced,
            shortnames=set(rtype.short_names), categories=set(rtype.categories),
            verbs={"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
            subresources=set(rtype.subresources),
        )  # fmt: skip

    def declare_builtins(self) -> None:
        """Serve the built-in resources this project uses, and create the namespaces a cluster starts with."""
        for rtype in registry.builtin_types():
            self._declare(rtype)
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def declare_crds(self, crd_dir: Path) -> None:
        """Serve the custom resources of the CRD files in `crd_dir`, and store the CRDs themselves."""
        for crd in registry.load_crds(crd_dir):
            for rtype in registry.crd_types(crd):
                self._declare(rtype)
            self.seed(crd)

    def seed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as if created by the cluster (defaulted, not validated nor admitted); the stored object."""
        rtype = self.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rtype is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
        obj = copy.deepcopy(obj)
        md = obj.setdefault("metadata", {})
        ns = md.get("namespace") if rtype.namespaced else None
        if self.get_object(rtype, ns, md["name"]) is None:
            schema.prune_and_default(rtype, obj)
            self._stamp_create(rtype, obj)
            self._store(rtype, ns, md["name"], obj, "ADDED")
        return obj

    def refuse(self, plural: str, message: str) -> None:
        """Refuse every create of `plural` with 403 and `message`, as an admission webhook would."""
        self._refusals[plural] = message

    def allow(self, plural: str) -> None:
        """Stop refusing `plural`."""
        self._refusals.pop(plural, None)

    def mint_token(self, namespace: str, service_account: str) -> str:
        """A bearer token for ServiceAccount `namespace/service_account`, as a projected token would be."""
        return self.auth.mint(namespace, service_account)

    # ---- the object store ----------------------------------------------------------------------

    def _resource(self, rtype: ResourceType) -> references.resource:
        return references.resource(group=rtype.group, version=rtype.version, plural=rtype.plural)

    def get_object(self, rtype: ResourceType, ns: str | None, name: str) -> dict[str, Any] | None:
        key = (self._resource(rtype), ns, name)
        if key not in self._objects or self._objects[key].deleted:
            return None
        return copy.deepcopy(self._objects[key].raw)

    def list_objects(self, rtype: ResourceType, ns: str | None = None) -> list[dict[str, Any]]:
        wanted = self._resource(rtype)
        return [
            copy.deepcopy(obj.raw)
            for (resource, namespace, _), obj in list(self._objects.items())
            if resource == wanted and not obj.deleted and (ns is None or namespace == ns)
        ]

    def all_objects(self) -> list[tuple[ResourceType, dict[str, Any]]]:
        """Every live object of every served type (a type's every version holds the same objects)."""
        found = []
        for (resource, _ns, _name), obj in list(self._objects.items()):
            rtype = self.registry.get(resource.group or "", resource.version or "", resource.plural or "")
            if rtype is not None and not obj.deleted:
                found.append((rtype, obj.raw))
        return found

    def next_rv(self) -> str:
        self.last_rv = next(self._rv)
        return str(self.last_rv)

    def _store(self, rtype: ResourceType, ns: str | None, name: str, obj: dict[str, Any], event: str) -> None:
        key = (self._resource(rtype), ns, name)
        if key in self._objects:
            self._objects[key].create(obj)
        else:
            self._objects[key] = obj
        self._emit(rtype, event, obj)

    def remove(self, rtype: ResourceType, ns: str | None, name: str) -> None:
        """Delete an object from storage for good (a DELETED event)."""
        key = (self._resource(rtype), ns, name)
        obj = copy.deepcopy(self._objects[key].raw)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self._objects[key].delete()
        self._applied = {k: v for k, v in self._applied.items() if k[0] != obj["metadata"].get("uid")}
        self._emit(rtype, "DELETED", obj)

    def replace(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        """Store a new version of an existing object written by a controller (new resourceVersion)."""
        obj["metadata"]["resourceVersion"] = self.next_rv()
        md = obj["metadata"]
        self._store(rtype, md.get("namespace") if rtype.namespaced else None, md["name"], obj, "MODIFIED")

    def _emit(self, rtype: ResourceType, event: str, obj: dict[str, Any]) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._log.append((rv, rtype.plural + "." + rtype.group, {"type": event, "object": copy.deepcopy(obj)}))
        if self._changed is not None:
            changed = self._changed

            async def wake() -> None:
                async with changed:
                    changed.notify_all()

            asyncio.get_running_loop().create_task(wake())

    # ---- request handling ----------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Requests with a protobuf body are served as the same request with its JSON form."""
        if raw_request.headers.get("Content-Type", "").startswith(PROTOBUF):
            raw_request = raw_request.clone(headers={**raw_request.headers, "Content-Type": "application/json"})
            body = await raw_request.read()
            try:
                converted = json.dumps(protobuf.decode(body)).encode()
            except (protobuf.Unsupported, IndexError, AssertionError, UnicodeDecodeError):
                message = f"the body of the request was in an unknown format - accepted media types include: {PROTOBUF}"
                return await self._render_error(status_error(415, "UnsupportedMediaType", message))
            raw_request._read_bytes = converted  # what aiohttp's read(), text() and json() return from now on
        return await super().__call__(raw_request)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, k8s.KubernetesError) and isinstance(exc.details, dict):
            body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                    "message": exc.message, "reason": exc.reason, "details": exc.details,
                    "code": exc.status}  # fmt: skip
            if not exc.details:
                del body["details"]
            return aiohttp.web.json_response(body, status=exc.status)
        return await super()._render_error(exc)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        raw = request._raw_request
        assert raw is not None
        info = paths.parse(raw.method, raw.path, dict(request.params))
        rbac.AGENT.set(request.headers.get("User-Agent", ""))
        user = self.auth.authenticate(request.headers.get("Authorization"))
        if info is not None and info.plural is None:
            legacy = raw.path.startswith("/api/") or raw.path.rstrip("/") == "/api"
            document = discovery.serve(self, info.group, info.version, legacy)
            if document is None:
                raise status_error(404, "NotFound", "the server could not find the requested resource")
            return self._respond(document)
        if raw.path.rstrip("/") in ("/api", "/apis"):
            return self._respond(discovery.serve(self, "", None, raw.path.rstrip("/") == "/api"))
        if info is None:
            if raw.path == "/version":
                return self._respond(VERSION)
            served = await openapi.serve(self, raw.path, request.headers.get("Accept", ""))
            if served is not None:
                return served
            return await super()._handle(request)
        rtype = self.registry.get(info.group, info.version, info.plural)
        if rtype is None or (info.subresource and info.subresource not in rtype.subresources):
            raise status_error(404, "NotFound", "the server could not find the requested resource")
        if rtype.namespaced and info.namespace is None and info.verb not in ("list", "watch"):
            raise status_error(404, "NotFound", "the server could not find the requested resource")
        if not rtype.namespaced and info.plural != "namespaces":
            info.namespace = None
        rbac.authorize(self, user, info, rtype)
        handler = getattr(self, f"_verb_{info.verb}", None)
        if handler is None:
            raise status_error(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        return await handler(request, info, rtype, user)

    def _body(self, request: rendering.Request, content_type: str) -> Any:
        text = request.body.decode() if request.body else ""
        try:
            if content_type == APPLY:
                return yaml.safe_load(text)
            return json.loads(text) if text else None
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding request body: {exc}") from None

    @staticmethod
    def _respond(obj: Any, code: int = 200, warnings: list[str] | None = None) -> aiohttp.web.Response:
        response = aiohttp.web.json_response(obj, status=code)
        for warning in warnings or []:
            response.headers.add("Warning", f"299 - {json.dumps(warning)}")  # Go's strconv.Quote
        return response

    # ---- reads ---------------------------------------------------------------------------------

    def _selected(self, request: rendering.Request, rtype: ResourceType, ns: str | None) -> list[dict[str, Any]]:
        from .selectors import fields_match, labels_match

        items = self.list_objects(rtype, ns if rtype.namespaced else None)
        label, field = request.params.get("labelSelector"), request.params.get("fieldSelector")
        if label:
            items = [o for o in items if labels_match((o["metadata"].get("labels") or {}), label)]
        if field:
            items = [o for o in items if fields_match(o, field, rtype.plural, rtype.custom)]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))

    def _table(self, request: rendering.Request, rtype: ResourceType, items: list[dict[str, Any]]) -> Any:
        if "as=Table" not in request.headers.get("Accept", ""):
            return None
        age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
        return tables.table(items, rtype.columns if rtype.columns is not None else [age])

    async def _verb_list(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        items = self._selected(request, rtype, info.namespace)
        table = self._table(request, rtype, items)
        if table is not None:
            table["metadata"] = {"resourceVersion": str(self.last_rv)}
            return self._respond(table)
        return self._respond({"apiVersion": rtype.api_version, "kind": f"{rtype.kind}List",
                              "metadata": {"resourceVersion": str(self.last_rv)}, "items": items})  # fmt: skip

    async def _verb_get(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        assert info.name is not None
        obj = self.get_object(rtype, info.namespace if rtype.namespaced else None, info.name)
        if obj is None:
            raise errors.not_found(rtype.plural, rtype.group, info.name)
        if info.subresource == "log":
            return aiohttp.web.Response(text="")
        table = self._table(request, rtype, [obj])
        return self._respond(table if table is not None else obj)

    async def _verb_watch(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        from .selectors import fields_match, labels_match

        raw = request._raw_request
        assert raw is not None
        if self._changed is None:
            self._changed = asyncio.Condition()
        label, field = request.params.get("labelSelector"), request.params.get("fieldSelector")
        ns = info.namespace if rtype.namespaced else None
        if info.name:
            field = ",".join(filter(None, [field, f"metadata.name={info.name}"]))
        type_key = rtype.plural + "." + rtype.group

        def wanted(obj: dict[str, Any]) -> bool:
            md = obj["metadata"]
            if ns is not None and md.get("namespace") != ns:
                return False
            if label and not labels_match(md.get("labels") or {}, label):
                return False
            return not field or fields_match(obj, field, rtype.plural, rtype.custom)

        since = request.params.get("resourceVersion") or "0"
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        position = len(self._log)
        if since == "0":
            start = self.last_rv
            for obj in self._selected(request, rtype, ns):
                if not info.name or obj["metadata"]["name"] == info.name:
                    await response.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
        else:
            start = int(since)
            position = next((i for i, (rv, _, _) in enumerate(self._log) if rv > start), len(self._log))
        timeout = float(request.params.get("timeoutSeconds") or 1800)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while True:
                while position < len(self._log):
                    rv, key, event = self._log[position]
                    position += 1
                    if key == type_key and rv > start and wanted(event["object"]):
                        await response.write(json.dumps(event).encode() + b"\n")
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                async with self._changed:
                    try:
                        await asyncio.wait_for(self._changed.wait(), timeout=min(left, 1.0))
                    except TimeoutError:
                        pass
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    # ---- writes --------------------------------------------------------------------------------

    def _stamp_create(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        md = obj["metadata"]
        md.update(uid=str(uuid.uuid4()), creationTimestamp=now(), resourceVersion=self.next_rv(), generation=1)
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            md.pop(key, None)
        if not rtype.namespaced:
            md.pop("namespace", None)
        lifecycle.on_create(rtype, obj)

    def _check_kind(self, rtype: ResourceType, obj: Any, url_ns: str | None, url_name: str | None) -> None:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request is not a JSON object")
        if obj.get("apiVersion") != rtype.api_version or obj.get("kind") != rtype.kind:
            got = f"{obj.get('apiVersion')}, Kind={obj.get('kind')}"
            raise errors.bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API version "
                f"({rtype.api_version})"
                if obj.get("apiVersion") != rtype.api_version
                else f"{got} does not match {rtype.kind}"
            )
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        if rtype.namespaced:
            if md.get("namespace") and url_ns and md["namespace"] != url_ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = url_ns or md.get("namespace")
        if url_name is not None and md.get("name") and md["name"] != url_name:
            raise errors.bad_request(
                f"the name of the object ({md['name']}) does not match the name on the URL ({url_name})"
            )
        if url_name is not None:
            md["name"] = url_name

    async def _verb_create(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        if info.subresource:
            return await lifecycle.create_subresource(self, request, info, rtype, user)
        obj = self._body(request, "application/json")
        self._check_kind(rtype, obj, info.namespace, None)
        md = obj["metadata"]
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
        name_errors = meta.validate(md, rtype.name_format)
        if name_errors and not md.get("name"):
            raise errors.invalid(rtype.kind, rtype.group, "", name_errors)
        ns = md.get("namespace") if rtype.namespaced else None
        if self.get_object(rtype, ns, md["name"]) is not None:
            raise errors.already_exists(rtype.plural, rtype.group, md["name"])
        if rtype.plural in self._refusals:
            raise status_error(403, "Forbidden", self._refusals[rtype.plural])
        warnings = self._admit(request, rtype, user, obj, None, "create")
        if request.params.get("dryRun") == "All":
            return self._respond(obj, 201, warnings)
        self._stamp_create(rtype, obj)
        self._store(rtype, ns, md["name"], obj, "ADDED")
        lifecycle.settle(self)
        return self._respond(obj, 201, warnings)

    def _admit(
        self,
        request: rendering.Request,
        rtype: ResourceType,
        user: Any,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        operation: str,
        subresource: str | None = None,
    ) -> list[str]:
        """Mutate and validate a write as the API server's decoding, strategies and admission do; warnings."""
        if rtype.plural == "secrets":
            lifecycle.fold_string_data(obj)
        validation = request.params.get("fieldValidation") or "Warn"
        warnings = schema.prune_default_validate(rtype, obj, old, validation)
        problems = meta.validate(obj["metadata"], rtype.name_format)
        if problems:
            raise errors.invalid(rtype.kind, rtype.group, obj["metadata"].get("name", ""), problems)
        lifecycle.check_finalizers(rtype, obj, old)
        admission.admit(self, user, rtype, obj, old, operation, subresource)
        return warnings

    async def _verb_update(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        assert info.name is not None
        body = self._body(request, "application/json")
        if info.plural == "namespaces" and info.subresource == "finalize":
            return self._respond(lifecycle.finalize_namespace(self, rtype, info.name, body))
        self._check_kind(rtype, body, info.namespace, info.name)
        return await self._write(request, info, rtype, user, lambda current: body, put=True)

    async def _verb_patch(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        assert info.name is not None
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type == STRATEGIC and rtype.custom or content_type not in (MERGE, STRATEGIC, JSON_PATCH, APPLY):
            accepted = [JSON_PATCH, MERGE, APPLY] + ([] if rtype.custom else [STRATEGIC])
            raise status_error(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(accepted),
            )
        body = self._body(request, content_type)
        from . import k8s_schemas

        type_schema = None if rtype.custom else k8s_schemas.schema_for(rtype.group, rtype.version, rtype.kind)
        manager = request.params.get("fieldManager") or ""
        if content_type == APPLY and not manager:
            raise errors.status_error(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )

        def patched(current: dict[str, Any] | None) -> dict[str, Any]:
            if content_type == APPLY:
                if not isinstance(body, dict):
                    raise errors.bad_request("apply patch must be an object")
                self._check_kind(rtype, body, info.namespace, info.name)
                last = self._applied.get(((current or {}).get("metadata", {}).get("uid", ""), manager))
                patch = patching.three_way(last, body, type_schema, not rtype.custom)
                if rtype.custom:
                    return patching.merge_patch(current or {}, patch)
                return patching.strategic_merge_patch(current or {}, patch, type_schema)
            assert current is not None
            if content_type == JSON_PATCH:
                if not isinstance(body, list):
                    raise errors.bad_request("json patch must be a list of operations")
                try:
                    return patching.json_patch(current, body)
                except Exception as exc:  # jsonpatch's failed test, missing path, bad pointer
                    raise status_error(
                        422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
                    ) from None
            if not isinstance(body, dict):
                raise errors.bad_request("the patch is not a JSON object")
            if content_type == STRATEGIC:
                return patching.strategic_merge_patch(current, body, type_schema)
            return patching.merge_patch(current, body)

        response = await self._write(request, info, rtype, user, patched, put=False, apply=content_type == APPLY)
        if content_type == APPLY and response.status < 300:
            stored = self.get_object(rtype, info.namespace if rtype.namespaced else None, info.name)
            if stored is not None:
                self._applied[stored["metadata"]["uid"], manager] = copy.deepcopy(body)
        return response

    async def _write(
        self,
        request: rendering.Request,
        info: paths.RequestInfo,
        rtype: ResourceType,
        user: Any,
        change: Any,
        put: bool,
        apply: bool = False,
    ) -> Any:
        assert info.name is not None
        ns = info.namespace if rtype.namespaced else None
        current = self.get_object(rtype, ns, info.name)
        if current is None and not apply:
            raise errors.not_found(rtype.plural, rtype.group, info.name)
        if current is None:  # apply creates
            obj = change(None)
            obj["metadata"].pop("resourceVersion", None)
            if rtype.plural in self._refusals:
                raise status_error(403, "Forbidden", self._refusals[rtype.plural])
            rbac.authorize(
                self,
                user,
                paths.RequestInfo(info.group, info.version, info.plural, info.namespace, None, None, "create"),
                rtype,
            )
            warnings = self._admit(request, rtype, user, obj, None, "create")
            self._stamp_create(rtype, obj)
            self._store(rtype, ns, info.name, obj, "ADDED")
            lifecycle.settle(self)
            return self._respond(obj, 201, warnings)
        obj = change(copy.deepcopy(current))
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise errors.bad_request("the patched object is not an object with metadata")
        sent_rv = obj["metadata"].get("resourceVersion")
        if put and not sent_rv and rtype.custom:
            raise errors.invalid(rtype.kind, rtype.group, info.name, [errors.FieldError(
                "metadata.resourceVersion", "Invalid", "must be specified for an update", 0)])  # fmt: skip
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(rtype.plural, rtype.group, info.name, errors.MODIFIED)
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        lifecycle.keep_server_fields(rtype, obj, current, info.subresource)
        warnings = self._admit(request, rtype, user, obj, current, "update", info.subresource)
        if obj == current and not warnings:
            return self._respond(current)
        if request.params.get("dryRun") == "All":
            return self._respond(obj, 200, warnings)
        lifecycle.bump_generation(obj, current)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self._store(rtype, ns, info.name, obj, "MODIFIED")
        lifecycle.settle(self)
        return self._respond(obj, 200, warnings)

    async def _verb_delete(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        assert info.name is not None
        options = self._body(request, "application/json") or {}
        for key in ("propagationPolicy", "gracePeriodSeconds", "dryRun"):
            if key in request.params:
                value = request.params[key]
                options[key] = int(value) if key == "gracePeriodSeconds" else value
        ns = info.namespace if rtype.namespaced else None
        current = self.get_object(rtype, ns, info.name)
        if current is None:
            raise errors.not_found(rtype.plural, rtype.group, info.name)
        result, code = lifecycle.delete(self, rtype, current, options)
        lifecycle.settle(self)
        return self._respond(result, code)

    async def _verb_deletecollection(
        self, request: rendering.Request, info: paths.RequestInfo, rtype: ResourceType, user: Any
    ) -> Any:
        options = self._body(request, "application/json") or {}
        for obj in self._selected(request, rtype, info.namespace):
            lifecycle.delete(self, rtype, obj, options)
        lifecycle.settle(self)
        return self._respond({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"})


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
