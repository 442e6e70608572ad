"""The OpenAPI documents the emulator serves, and CEL rule options the project's CRDs do not use yet.

The documents must carry what kubectl and helm look for: per group-version paths whose operations
name their group/version/kind and accept `fieldValidation`, and each type's schema. The CEL options
(`messageExpression`, `fieldPath`, `reason`, `optionalOldSelf`) behave as the Kubernetes CRD
documentation describes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .emulator import GeofedEmulator
from .objects import call

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]

WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "properties": {
                    "min": {"type": "integer"}, "max": {"type": "integer"},
                    "owner": {"type": "string"},
                },
                "x-kubernetes-validations": [
                    {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' > max'",
                     "fieldPath": ".min", "reason": "FieldValueForbidden"},
                    {"rule": "!has(oldSelf.owner) || self.owner == oldSelf.owner", "optionalOldSelf": True,
                     "message": "owner cannot change"},
                ],
            }},
        }}}],
    },
}  # fmt: skip
WIDGET_PATH = "/apis/example.com/v1/namespaces/default/widgets"


@pytest.fixture()
def widgets(api: GeofedEmulator, tmp_path: Path) -> GeofedEmulator:
    (tmp_path / "widgets.yaml").write_text(yaml.safe_dump(WIDGETS))
    api.declare_crds(tmp_path)
    return api


def widget(**spec: object) -> dict:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


async def test_message_expression_field_path_and_reason(widgets: GeofedEmulator) -> None:
    status, body = await call(widgets, "POST", WIDGET_PATH, widget(min=5, max=2))
    assert status == 422
    assert body["message"] == 'Widget.example.com "w" is invalid: spec.min: Forbidden: min 5 > max'
    assert body["details"]["causes"][0] == {"reason": "FieldValueForbidden", "message": "Forbidden: min 5 > max",
                                            "field": "spec.min"}  # fmt: skip


async def test_optional_old_self_runs_on_create_and_compares_on_update(widgets: GeofedEmulator) -> None:
    assert (await call(widgets, "POST", WIDGET_PATH, widget(min=1, max=2, owner="a")))[0] == 201
    patch = {"spec": {"owner": "b"}}
    status, body = await call(widgets, "PATCH", f"{WIDGET_PATH}/w", patch, "application/merge-patch+json")
    assert (
        status == 422
        and body["message"] == 'Widget.example.com "w" is invalid: spec: Invalid value: "object": owner cannot change'
    )


async def test_openapi_v3_documents(api: GeofedEmulator) -> None:
    status, root = await call(api, "GET", "/openapi/v3")
    assert status == 200
    assert {"api/v1", "apis/apps/v1", "apis/geofed.io/v1alpha1", "apis/rbac.authorization.k8s.io/v1"} <= set(
        root["paths"]
    )
    url = root["paths"]["apis/geofed.io/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/geofed.io/v1alpha1?hash=")
    status, doc = await call(api, "GET", url)
    assert status == 200 and doc["openapi"].startswith("3.")
    item = doc["paths"]["/apis/geofed.io/v1alpha1/namespaces/{namespace}/federations/{name}"]
    assert item["patch"]["x-kubernetes-group-version-kind"] == {"group": "geofed.io", "version": "v1alpha1",
                                                                 "kind": "Federation"}  # fmt: skip
    assert "fieldValidation" in {p["name"] for p in item["patch"]["parameters"]}
    schema = doc["components"]["schemas"]["io.geofed.v1alpha1.Federation"]
    assert schema["properties"]["spec"]["properties"]["model"]["properties"]["family"]["enum"] == ["gpt2", "llama"]
    containers = doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"  # what strategic merge patches key on
    assert (await call(api, "GET", "/openapi/v3/apis/nothing.example.com/v1"))[0] == 404


async def test_openapi_v2_json_and_protobuf(api: GeofedEmulator) -> None:
    async with api.get("/openapi/v2", headers={"Accept": "application/json"}) as resp:
        doc = await resp.json()
    assert doc["swagger"] == "2.0" and "io.geofed.v1alpha1.SiteClient" in doc["definitions"]
    protobuf = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    async with api.get("/openapi/v2", headers={"Accept": protobuf}) as resp:
        assert resp.status == 200 and resp.content_type.endswith("+protobuf")
        assert (await resp.read()).startswith(b"\n\x032.0")  # field 1 (swagger) = "2.0"
