"""Object names, labels, annotations, object-count quotas and built-in schemas, as a kube-apiserver checks them.

The expected messages are apimachinery's validation messages (IsDNS1123Subdomain, IsDNS1035Label,
IsQualifiedName, IsValidLabelValue, the annotation size limit) and the ResourceQuota admission
plugin's; the limits are Kubernetes' (253 for names, 63 for label values and name parts, 256 KiB of
annotations).
"""

from __future__ import annotations

from typing import Any

import pytest

from geofed_operator.kube import resource_path

from .conftest import NAMESPACE
from .emulator import GeofedEmulator
from .objects import call, create, get

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, "
    "and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
    "'[a-z]([-a-z0-9]*[a-z0-9])?')"
)
LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE, **meta}}


async def post(api: GeofedEmulator, obj: dict[str, Any]) -> tuple[int, Any]:
    kind_path = resource_path(obj["apiVersion"], obj["kind"], NAMESPACE)
    return await call(api, "POST", kind_path, obj)


@pytest.mark.parametrize(
    ("name", "accepted"),
    [("a.b-c", True), ("x" * 253, True), ("x" * 254, False), ("Upper", False), ("-lead", False), ("a_b", False)],
)
async def test_names_are_dns_subdomains(api: GeofedEmulator, name: str, accepted: bool) -> None:
    status, body = await post(api, cm(name))
    if accepted:
        assert status == 201
        return
    assert status == 422
    problems = (["must be no more than 253 characters"] if len(name) > 253 else []) + (
        [SUBDOMAIN] if len(name) <= 253 else []
    )
    errors = [f'metadata.name: Invalid value: "{name}": {p}' for p in problems]
    assert body["message"] == f'ConfigMap "{name}" is invalid: {errors[0]}'


async def test_service_names_are_dns1035_labels(api: GeofedEmulator) -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "7b-ps", "namespace": NAMESPACE},
               "spec": {"ports": [{"port": 7443}]}}  # fmt: skip
    status, body = await post(api, service)
    assert (
        status == 422
        and body["message"] == f'Service "7b-ps" is invalid: metadata.name: Invalid value: "7b-ps": {DNS1035}'
    )
    service["metadata"]["name"] = "a.b"
    assert (await post(api, service))[0] == 422  # a subdomain is not a label
    service["metadata"]["name"] = "b7-ps"
    assert (await post(api, service))[0] == 201


async def test_label_values_keys_and_annotation_size(api: GeofedEmulator) -> None:
    value = "v" * 64
    status, body = await post(api, cm("long", labels={"geofed.io/client": value}))
    assert status == 422
    assert (
        body["message"]
        == f'ConfigMap "long" is invalid: metadata.labels: Invalid value: "{value}": must be no more than 63 characters'
    )
    assert (await post(api, cm("ok63", labels={"geofed.io/client": "v" * 63})))[0] == 201
    status, body = await post(api, cm("bad", labels={"app": "has space"}))
    assert (
        status == 422
        and body["message"] == f'ConfigMap "bad" is invalid: metadata.labels: Invalid value: "has space": {LABEL_VALUE}'
    )
    status, body = await post(api, cm("key", labels={"Bad_Prefix/x": "v"}))
    assert status == 422 and body["message"].startswith(
        'ConfigMap "key" is invalid: metadata.labels: Invalid value: "Bad_Prefix/x": '
        "prefix part a lowercase RFC 1123 subdomain"
    )
    assert (await post(api, cm("big", annotations={"a": "x" * (256 * 1024)})))[0] == 422
    status, body = await post(api, cm("big", annotations={"a": "x" * (256 * 1024)}))
    assert (
        body["message"] == 'ConfigMap "big" is invalid: metadata.annotations: Too long: must have at most 262144 bytes'
    )
    assert (await post(api, cm("fits", annotations={"a": "x" * (256 * 1024 - 1)})))[0] == 201


async def test_updates_are_checked_too(api: GeofedEmulator) -> None:
    await create(api, cm("target"))
    path = resource_path("v1", "ConfigMap", NAMESPACE, "target")
    status, _ = await call(
        api, "PATCH", path, {"metadata": {"labels": {"x": "y" * 64}}}, "application/merge-patch+json"
    )
    assert status == 422 and "labels" not in get(api, "v1/configmaps", NAMESPACE, "target")["metadata"]


async def test_object_count_quotas(api: GeofedEmulator) -> None:
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "counts", "namespace": NAMESPACE},
             "spec": {"hard": {"count/secrets": "1", "count/jobs.batch": "0", "pods": "1"}}}  # fmt: skip
    await create(api, quota)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1", "namespace": NAMESPACE}}
    assert (await post(api, secret))[0] == 201
    status, body = await post(api, {**secret, "metadata": {"name": "s2", "namespace": NAMESPACE}})
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        'secrets "s2" is forbidden: exceeded quota: counts, requested: count/secrets=1, used: count/secrets=1, '
        "limited: count/secrets=1"
    )
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NAMESPACE},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "i"}]}}}}  # fmt: skip
    status, body = await post(api, job)
    assert status == 403 and body["message"] == (
        'jobs.batch "j" is forbidden: exceeded quota: counts, requested: count/jobs.batch=1, used: count/jobs.batch=0, '
        "limited: count/jobs.batch=0"
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": NAMESPACE},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
    assert (await post(api, pod))[0] == 201
    assert (await post(api, {**pod, "metadata": {"name": "p2", "namespace": NAMESPACE}}))[0] == 403
    finished = resource_path("v1", "Pod", NAMESPACE, "p1", "status")
    await call(api, "PATCH", finished, {"status": {"phase": "Succeeded"}}, "application/merge-patch+json")
    assert (await post(api, {**pod, "metadata": {"name": "p2", "namespace": NAMESPACE}}))[
        0
    ] == 201  # terminal pods don't count
    await call(api, "DELETE", resource_path("v1", "Secret", NAMESPACE, "s1"))
    assert (await post(api, {**secret, "metadata": {"name": "s2", "namespace": NAMESPACE}}))[0] == 201


async def test_built_in_kinds_are_checked_against_their_schema(api: GeofedEmulator) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": NAMESPACE},
                  "spec": {"replicas": "two", "selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [{"name": "c"}]}}}}  # fmt: skip
    status, body = await post(api, deployment)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith(
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string'
    )
    deployment["spec"]["replicas"] = 1
    status, body = await post(api, deployment)
    assert status == 422
    assert body["message"] == 'Deployment.apps "d" is invalid: spec.template.spec.containers[0].image: Required value'
    deployment["spec"]["template"]["spec"]["containers"][0].update(image="busybox", imagePolicy="Always")
    status, body = await call(api, "POST", resource_path("apps/v1", "Deployment", NAMESPACE), deployment,
                              params={"fieldValidation": "Strict"})  # fmt: skip
    assert status == 400 and body["message"].endswith('unknown field "spec.template.spec.containers[0].imagePolicy"')
    async with api.post(resource_path("apps/v1", "Deployment", NAMESPACE), json=deployment) as resp:
        assert resp.status == 201
        assert resp.headers.getall("Warning") == [
            '299 - "unknown field \\"spec.template.spec.containers[0].imagePolicy\\""'
        ]
        assert "imagePolicy" not in (await resp.json())["spec"]["template"]["spec"]["containers"][0]
