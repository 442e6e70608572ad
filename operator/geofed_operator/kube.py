"""A small synchronous Kubernetes REST adapter over the official client's transport and auth.

Handlers need a handful of verbs on a few kinds (get, list by label, server-side apply, create,
delete, patch status); going through `ApiClient` keeps in-cluster and kubeconfig auth exactly as the
official client does, while the bodies stay plain dicts built by the pure `build_*` functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

FIELD_MANAGER = "geofed-operator"

# (apiVersion, kind) -> plural of the kinds the operator touches.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "Secret"): "secrets",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Pod"): "pods",
    ("v1", "Event"): "events",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("apps/v1", "Deployment"): "deployments",
    ("batch/v1", "Job"): "jobs",
    ("geofed.io/v1alpha1", "Federation"): "federations",
    ("geofed.io/v1alpha1", "SiteClient"): "siteclients",
}


class KubeError(Exception):
    """A failed API call, with the HTTP status and the API server's own reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def resource_path(
    api_version: str, kind: str, namespace: str | None, name: str | None = None, subresource: str | None = None
) -> str:
    """`/api/v1/namespaces/ns/secrets/name` and the like."""
    plural = PLURALS[(api_version, kind)]
    path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespace:
        path += f"/namespaces/{quote(namespace)}"
    path += f"/{plural}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


def label_selector(labels: Mapping[str, str]) -> str:
    """`a=b,c=d` (equality selectors only)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class Kube:
    """Typed-by-dict access to the API server through a `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client

    @classmethod
    def from_environment(cls) -> Kube:
        """In-cluster service account, else the kubeconfig (`KUBECONFIG` or ~/.kube/config)."""
        import kubernetes

        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()
        return cls(kubernetes.client.ApiClient())

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One API call; raises KubeError for any non-2xx answer."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        serialized = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(*serialized, _request_timeout=30)
        data = response.read() if hasattr(response, "read") else response.data
        text = data.decode() if isinstance(data, bytes) else (data or "")
        payload = json.loads(text) if text.strip() else {}
        if not 200 <= response.status <= 299:
            reason = payload.get("reason", "") if isinstance(payload, dict) else ""
            message = payload.get("message", text) if isinstance(payload, dict) else text
            raise KubeError(response.status, reason or "Error", message)
        return payload

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist."""
        try:
            return self.request("GET", resource_path(api_version, kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Objects in `namespace` carrying all of `labels`."""
        query = [("labelSelector", label_selector(labels))]
        items = self.request("GET", resource_path(api_version, kind, namespace), query=query).get("items") or []
        # An API server filters already; re-checking costs nothing and keeps the contract explicit.
        return [
            o
            for o in items
            if all(((o.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    def events_about(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """Events whose involvedObject is `kind`/`name` in `namespace` (e.g. a Job's FailedCreate)."""
        fields = f"involvedObject.kind={kind},involvedObject.name={name}"
        path = resource_path("v1", "Event", namespace)
        items = self.request("GET", path, query=[("fieldSelector", fields)]).get("items") or []
        return [
            e
            for e in items
            if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name
        ]

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST a new object (KubeError 409 if it exists)."""
        meta = obj["metadata"]
        return self.request("POST", resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace")), dict(obj))

    def ensure(self, obj: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """(object, created): create it unless an object of that name exists, which is returned untouched."""
        try:
            return self.create(obj), True
        except KubeError as exc:
            if exc.status != 409:
                raise
        meta = obj["metadata"]
        existing = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if existing is None:  # deleted in between: try once more
            return self.create(obj), True
        return existing, False

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply as `geofed-operator`: fields we no longer set are removed, others' kept."""
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        try:
            return self.request("PATCH", path, dict(obj), query=query, content_type="application/apply-patch+yaml")
        except KubeError as exc:
            if exc.status != 404:  # an API server creates on apply; simpler servers answer 404
                raise
        try:
            return self.create(obj)
        except KubeError as exc:
            if exc.status != 409:  # created meanwhile (a timer and a change handler of one object): apply again
                raise
        return self.request("PATCH", path, dict(obj), query=query, content_type="application/apply-patch+yaml")

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (of the status subresource with subresource="status")."""
        path = resource_path(api_version, kind, namespace, name, subresource)
        return self.request("PATCH", path, dict(patch), content_type="application/merge-patch+json")

    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
        grace_period_s: int | None = None,
    ) -> bool:
        """Delete (dependents per `propagation`; a pod within `grace_period_s`, 0 forcing it); False if gone."""
        path = resource_path(api_version, kind, namespace, name)
        body: dict[str, Any] = {"propagationPolicy": propagation}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        try:
            self.request("DELETE", path, body, query=[("propagationPolicy", propagation)])
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True
