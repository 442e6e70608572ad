"""create, update (PUT), patch (JSON, merge, strategic merge, apply), delete and deletecollection."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import yaml
from kmock._internal import rendering

from . import admission, errors, k8s_schemas, lifecycle, meta, patching, paths, rbac, schema
from .errors import status_error
from .reads import Reads
from .registry import ResourceType
from .store import now

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


class Writes(Reads):
    """The write verbs; each write goes through decoding, validation and admission (`_admit`), then the controllers."""

    _refusals: dict[str, str]

    def _body(self, request: rendering.Request, content_type: str) -> Any:
        text = request.body.decode() if request.body else ""
        try:
            if content_type == APPLY:
                return yaml.safe_load(text)
            return json.loads(text) if text else None
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding request body: {exc}") from None

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
