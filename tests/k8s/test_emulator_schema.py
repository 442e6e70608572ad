"""Writes of custom resources are pruned, defaulted and validated from the CRDs as a kube-apiserver does.

The expected messages are the API server's (`<Kind>.<group> "<name>" is invalid: <field errors>`), with
each field error written as apimachinery prints it; the expected defaults and limits are the CRD's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from geofed_operator.kube import resource_path

from .conftest import NAMESPACE
from .emulator import GeofedEmulator
from .objects import call, get
from .test_operator_federation import FED
from .test_operator_siteclient import SITECLIENT

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
REPO = Path(__file__).resolve().parents[2]
FEDS = resource_path("geofed.io/v1alpha1", "Federation", NAMESPACE)
MERGE = "application/merge-patch+json"


def fed(name: str = "demo", **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(FED)
    obj["metadata"]["name"] = name
    obj["spec"].update(spec)
    return obj


async def refused(api: GeofedEmulator, obj: dict[str, Any]) -> str:
    status, body = await call(api, "POST", FEDS, obj)
    assert status == 422, body
    assert body["reason"] == "Invalid" and body["details"]["kind"] == "Federation"
    assert get(api, "geofed.io/v1alpha1/federations", NAMESPACE, obj["metadata"]["name"]) is None
    return body["message"]


async def test_defaults_are_applied_and_unknown_fields_pruned_with_a_warning(api: GeofedEmulator) -> None:
    obj = fed(affinity={"nodeAffinity": {"anything": ["kept"]}})
    obj["spec"]["aggregation"]["typo"] = 1
    obj["spec"]["unknownField"] = {"a": 1}
    async with api.post(FEDS, json=obj) as resp:
        assert resp.status == 201
        warnings = resp.headers.getall("Warning", [])
        stored = await resp.json()
    spec = stored["spec"]
    assert spec["model"]["family"] == "gpt2" and spec["model"]["nEmbd"] == 128  # CRD defaults
    assert spec["codec"]["name"] == "int8" and spec["service"]["port"] == 7443
    assert spec["aggregation"]["mode"] == "sync" and spec["aggregation"]["globalLr"] == 0.7  # given values kept
    assert "typo" not in spec["aggregation"] and "unknownField" not in spec
    assert spec["affinity"] == {"nodeAffinity": {"anything": ["kept"]}}  # x-kubernetes-preserve-unknown-fields
    assert sorted(warnings) == [
        '299 - "unknown field \\"spec.aggregation.typo\\""',
        '299 - "unknown field \\"spec.unknownField\\""',
    ]


async def test_strict_field_validation_refuses_unknown_fields(api: GeofedEmulator) -> None:
    obj = fed()
    obj["spec"]["unknownField"] = 1
    status, body = await call(api, "POST", FEDS, obj, params={"fieldValidation": "Strict"})
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'Federation in version "v1alpha1" cannot be handled as a Federation: strict decoding error: '
        'unknown field "spec.unknownField"'
    )


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"aggregation": {"mode": "fast"}},
         'spec.aggregation.mode: Unsupported value: "fast": supported values: "sync", "async", "auto"'),
        ({"psShards": "two"},
         'spec.psShards: Invalid value: "string": spec.psShards in body must be of type integer: "string"'),
        ({"service": {"port": 99999}},
         "spec.service.port: Invalid value: 99999: spec.service.port in body should be less than or equal to 65535"),
        ({"terminationGracePeriodSeconds": 5}, "spec.terminationGracePeriodSeconds: Invalid value: 5: "
         "spec.terminationGracePeriodSeconds in body should be greater than or equal to 10"),
        ({"groups": [{"name": "Bad_Name"}]}, 'spec.groups[0].name: Invalid value: "Bad_Name": spec.groups[0].name '
         "in body should match '^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$'"),
        ({"groups": [{"address": "ps.example.org"}]}, "spec.groups[0].name: Required value"),
        ({"image": "x" * 513}, "spec.image: Too long: may not be more than 512 bytes"),
        ({"storage": {"size": "lots"}}, 'spec.storage.size: Invalid value: "lots": spec.storage.size in body should '
         "match '^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$'"),
        ({"model": {"nEmbd": 130, "nHead": 4}}, 'spec.model: Invalid value: "object": model.nEmbd must be divisible '
         "by model.nHead"),
        ({"service": {"type": "ClusterIP", "nodePort": 30443}},
         'spec.service: Invalid value: "object": nodePort needs type NodePort or LoadBalancer'),
    ],
)  # fmt: skip
async def test_invalid_specs_are_refused_with_the_api_servers_message(
    api: GeofedEmulator, spec: dict, error: str
) -> None:
    assert await refused(api, fed("bad", **spec)) == f'Federation.geofed.io "bad" is invalid: {error}'


async def test_several_errors_are_listed_together(api: GeofedEmulator) -> None:
    message = await refused(api, fed("bad", psShards=0, imagePullPolicy="Sometimes"))
    assert message == (
        'Federation.geofed.io "bad" is invalid: [spec.psShards: Invalid value: 0: spec.psShards in body should be '
        'greater than or equal to 1, spec.imagePullPolicy: Unsupported value: "Sometimes": supported values: '
        '"Always", "IfNotPresent", "Never"]'
    )


async def test_a_root_rule_sees_the_name(api: GeofedEmulator) -> None:
    crd = yaml.safe_load((REPO / "crds/geofed.io_federations.yaml").read_text())
    rule_message = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]["message"]
    message = await refused(api, fed("7b-llama"))
    assert message == f'Federation.geofed.io "7b-llama" is invalid: <nil>: Invalid value: "object": {rule_message}'


async def test_updates_are_validated_and_transition_rules_use_the_old_object(api: GeofedEmulator) -> None:
    assert (await call(api, "POST", FEDS, fed(storage={"storageClassName": "fast"})))[0] == 201
    path = f"{FEDS}/demo"
    status, body = await call(api, "PATCH", path, {"spec": {"model": {"nLayer": 12}}}, MERGE)
    assert status == 422
    assert body["message"] == (
        'Federation.geofed.io "demo" is invalid: spec.model: Invalid value: "object": model is immutable: the global '
        "model cannot change shape; create a new Federation"
    )
    status, body = await call(api, "PATCH", path, {"spec": {"storage": {"storageClassName": "slow"}}}, MERGE)
    assert status == 422 and body["message"].endswith(
        'spec.storage.storageClassName: Invalid value: "string": storageClassName is immutable'
    )
    status, body = await call(api, "PATCH", path, {"spec": {"service": {"port": 0}}}, MERGE)
    assert status == 422 and "spec.service.port in body should be greater than or equal to 1" in body["message"]
    stored = get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo")
    assert stored["spec"]["model"]["nLayer"] == 2 and stored["spec"]["service"]["port"] == 7443  # nothing written
    status, body = await call(api, "PATCH", path, {"spec": {"storage": {"size": "20Gi"}}}, MERGE)
    assert status == 200 and body["spec"]["storage"] == {"storageClassName": "fast", "size": "20Gi",
                                                         "retainOnDelete": False}  # fmt: skip
    assert body["metadata"]["generation"] == 2


async def test_status_is_validated_through_the_status_subresource(api: GeofedEmulator) -> None:
    await call(api, "POST", FEDS, fed())
    condition = {"type": "Ready", "status": "True", "reason": "Serving", "lastTransitionTime": "yesterday"}
    status, body = await call(api, "PATCH", f"{FEDS}/demo/status", {"status": {"conditions": [condition]}}, MERGE)
    assert status == 422
    assert body["message"] == (
        'Federation.geofed.io "demo" is invalid: status.conditions[0].lastTransitionTime: Invalid value: "yesterday": '
        'status.conditions[0].lastTransitionTime in body must be of type date-time: "yesterday"'
    )
    condition["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    status, body = await call(api, "PATCH", f"{FEDS}/demo/status", {"status": {"conditions": [condition]}}, MERGE)
    assert status == 200 and body["status"]["conditions"][0]["message"] == ""  # the CRD's default


async def test_siteclient_rules(api: GeofedEmulator) -> None:
    path = resource_path("geofed.io/v1alpha1", "SiteClient", NAMESPACE)
    both = copy.deepcopy(SITECLIENT)
    both["spec"]["data"] = {"pvc": {"claimName": "d"}, "hostPath": {"path": "/data"}}
    status, body = await call(api, "POST", path, both)
    assert status == 422
    assert body["message"] == (
        'SiteClient.geofed.io "gpu0" is invalid: spec.data: Invalid value: "object": set exactly one of data.pvc and '
        "data.hostPath"
    )
    assert (await call(api, "POST", path, SITECLIENT))[0] == 201
    status, body = await call(api, "PATCH", f"{path}/gpu0", {"spec": {"site": "mit"}}, MERGE)
    assert status == 422
    assert (
        body["message"]
        == 'SiteClient.geofed.io "gpu0" is invalid: spec.site: Invalid value: "string": site is immutable'
    )


async def test_a_siteclient_with_more_processes_than_gpus_is_refused(api: GeofedEmulator) -> None:
    path = resource_path("geofed.io/v1alpha1", "SiteClient", NAMESPACE)
    crowded = copy.deepcopy(SITECLIENT)
    crowded["spec"].update(gpusPerPod=1, procsPerPod=2)
    status, body = await call(api, "POST", path, crowded)
    assert status == 422
    assert body["message"] == (
        'SiteClient.geofed.io "gpu0" is invalid: spec: Invalid value: "object": procsPerPod must not exceed '
        "gpusPerPod: each training process needs a GPU of its own"
    )
    cpu = copy.deepcopy(SITECLIENT)
    cpu["spec"].update(gpusPerPod=0, procsPerPod=2)
    assert (await call(api, "POST", path, cpu))[0] == 201
