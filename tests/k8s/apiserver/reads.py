"""get, list (with label and field selectors, and server-side tables) and watch from a resourceVersion."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp.web
from kmock._internal import rendering

from .. import tables
from . import errors, paths
from .registry import ResourceType
from .selectors import fields_match, labels_match
from .store import Store


class Reads(Store):
    """The read verbs."""

    @staticmethod
    def _respond(obj: Any, code: int = 200, warnings: list[str] | None = None) -> aiohttp.web.Response:
        response = aiohttp.web.json_response(obj, status=code)
        for warning in warnings or []:
            response.headers.add("Warning", f"299 - {json.dumps(warning)}")  # Go's strconv.Quote
        return response

    def _selected(self, request: rendering.Request, rtype: ResourceType, ns: str | None) -> list[dict[str, Any]]:
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

        def as_table(obj: dict[str, Any]) -> dict[str, Any]:
            """Each event's object as the client asked for it: a one-row Table for `kubectl get -w`."""
            return self._table(request, rtype, [obj]) or obj

        since = request.params.get("resourceVersion") or "0"
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        position = len(self._log)
        if since == "0":
            start = self.last_rv
            for obj in self._selected(request, rtype, ns):
                if not info.name or obj["metadata"]["name"] == info.name:
                    await response.write(json.dumps({"type": "ADDED", "object": as_table(obj)}).encode() + b"\n")
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
                        event = {**event, "object": as_table(event["object"])}
                        await response.write(json.dumps(event).encode() + b"\n")
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0 or raw.transport is None or raw.transport.is_closing():
                    break  # the timeout ran out, or the client went away
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns normally when it is cancelled
                # in the same loop pass as the change it waits for, and this loop would then outlive its
                # cancellation (a shut-down server waits on it for the watch's whole timeout).
                try:
                    async with self._changed, asyncio.timeout(min(left, 1.0)):
                        await self._changed.wait()
                except TimeoutError:
                    pass
        except ConnectionResetError:  # the client went away mid-write; a cancellation propagates
            pass
        return response
