"""The emulated API server: kmock's HTTP server and object store, with a kube-apiserver's request handling.

kmock records every request and keeps objects (`api.objects`); this class serves the resource API
itself, as a real API server would for what this project does: discovery (discovery.py) and the
OpenAPI documents (openapi.py), authentication by bearer token and RBAC (rbac.py), reads and watches
from a resourceVersion (reads.py), writes (writes.py) with JSON/merge/strategic-merge patches and
apply (patching.py), resourceVersion preconditions and status subresources, schema pruning,
defaulting and validation with CEL (schema.py, cel.py), metadata validation (meta.py), admission
(admission.py: namespace lifecycle, owner-reference permissions, object-count quotas), protobuf
request bodies (protobuf.py), and deletion with finalizers, graceful pod deletion, garbage
collection, namespace and CRD deletion (lifecycle.py).

What a real API server does that this one does not:
- no protobuf, CBOR or YAML responses (JSON only), no chunked lists (`limit`/`continue` return everything),
  no bookmarks in watches, no watch cache expiry (`410 Gone`), no aggregated discovery;
- server-side tables (`kubectl get`) have the CRDs' printer columns, but only NAME and AGE for built-ins;
- CustomResourceDefinitions written through the API are not themselves validated (a structurally
  invalid schema is accepted), and only their served versions' schemas are used (no conversion);
- built-in types get no defaulting beyond a Secret's `stringData` and `type`, a Pod's and a PVC's `phase`, a
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
import copy
import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import k8s, rendering

from . import discovery, openapi, paths, protobuf, rbac, registry, schema
from .errors import status_error
from .writes import Writes

PROTOBUF = "application/vnd.kubernetes.protobuf"


VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "emulated", "gitTreeState": "clean",
           "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3", "compiler": "gc",
           "platform": "linux/amd64"}  # fmt: skip


class GeofedEmulator(Writes, kmock.KubernetesEmulator):
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
