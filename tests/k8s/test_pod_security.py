"""The pods the operator and the chart make pass Pod Security `restricted` and OpenShift's UID ranges.

The emulator enforces both on pod creation (`tests/k8s/apiserver/pod_security.py` says what the real
admission plug-ins check beyond that): a namespace labelled `restricted`, and one annotated with an
OpenShift UID range as restricted-v2 reads it. The default pods run as 10001, which OpenShift refuses;
`podSecurityContext.platformAssigned` (the chart: runAsUser/runAsGroup null) lets it assign its own.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from geofed_operator.cloud_builders import FederationObject, build_ps_deployment
from geofed_operator.shard_builders import build_shard_deployment
from geofed_operator.site_builders import SiteClientObject, build_client_job
from geofed_operator.trainer_builders import build_trainer_deployment

from .conftest import NAMESPACE, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .kubelet import Kubelet
from .node.testing import node_root
from .objects import create, get, names_of, patch
from .test_chart import render
from .test_operator_federation import FED, _runner
from .test_operator_siteclient import SITECLIENT

__all__ = ["node_root"]
pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator), pytest.mark.timeout(120)]

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
OPENSHIFT = {"openshift.io/sa.scc.uid-range": "1000680000/10000",
             "openshift.io/sa.scc.supplemental-groups": "1000680000/10000"}  # fmt: skip
SPLIT = {"paradigm": {"name": "fsl-sage"}}


async def _namespace(api: GeofedEmulator, name: str, annotations: dict[str, str] | None = None) -> str:
    meta = {"name": name, "labels": RESTRICTED, "annotations": annotations or {}}
    await create(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    return name


async def _post_pod(api: GeofedEmulator, ns: str, template: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST a pod made from a workload's pod template, as its controller would; (status code, body)."""
    name = f"pod-{len(names_of(api, 'v1/pods', ns))}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns,
           "labels": (template.get("metadata") or {}).get("labels", {})}, "spec": copy.deepcopy(template["spec"])}
    async with api.post(f"/api/v1/namespaces/{ns}/pods", json=pod) as resp:
        return resp.status, await resp.json()


def _templates(security: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The pod templates of the operator's workloads (PS, shard, split trainer, client Job), `security` in both CRs."""
    extra = {"podSecurityContext": security} if security is not None else {}
    fed_body = {**FED, "spec": {**FED["spec"], **SPLIT, **extra}}
    fed = FederationObject.from_body(fed_body, "geofed/ps:test", "geofed/client:test")
    sharded = FederationObject.from_body({**FED, "spec": {**FED["spec"], "psShards": 2, **extra}}, "geofed/ps:test")
    sc = SiteClientObject.from_body({**SITECLIENT, "spec": {**SITECLIENT["spec"], **extra}}, "geofed/client:test")
    return {
        "ps": build_ps_deployment(fed, config_hash="x")["spec"]["template"],
        "shard": build_shard_deployment(sharded, 1, config_hash="x")["spec"]["template"],
        "trainer": build_trainer_deployment(fed, config_hash="x")["spec"]["template"],
        "client": build_client_job(sc, 1, "gpu0-token-1")["spec"]["template"],
    }


async def test_a_root_pod_is_refused_with_the_pod_security_message(api) -> None:
    ns = await _namespace(api, "restricted")
    code, body = await _post_pod(api, ns, {"spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    assert code == 403
    assert body["message"] == (
        'pods "pod-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container '
        '"c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )


@pytest.mark.parametrize("security", [None, {"platformAssigned": True}, {"runAsUser": 2000, "fsGroup": 3000}])
async def test_every_operator_pod_passes_pod_security_restricted(api, security) -> None:
    ns = await _namespace(api, "restricted")
    for kind, template in _templates(security).items():
        code, body = await _post_pod(api, ns, template)
        assert code == 201, (kind, body.get("message"))


async def test_on_openshift_the_default_uid_is_refused_and_platform_assigned_is_admitted(api) -> None:
    ns = await _namespace(api, "openshift", OPENSHIFT)
    for kind, template in _templates().items():
        code, body = await _post_pod(api, ns, template)
        assert code == 403, kind
        assert ".spec.securityContext.runAsUser: Invalid value: 10001: must be in the ranges: [1000680000, " \
            "1000689999]" in body["message"]
    for kind, template in _templates({"platformAssigned": True}).items():
        assert "runAsUser" not in template["spec"]["securityContext"] and "fsGroup" not in template["spec"][
            "securityContext"]  # fmt: skip
        code, pod = await _post_pod(api, ns, template)
        assert code == 201, (kind, pod.get("message"))
        # The SCC picked the range's first IDs; runAsNonRoot is still the pod's own.
        assert [c["securityContext"]["runAsUser"] for c in pod["spec"]["containers"]] == [1000680000]
        assert pod["spec"]["securityContext"]["fsGroup"] == 1000680000
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


async def test_the_chart_operator_pod_takes_an_openshift_uid_when_its_ids_are_null(api) -> None:
    ns = await _namespace(api, "openshift", OPENSHIFT)

    def operator_template(values: dict[str, Any]) -> dict[str, Any]:
        return next(d for d in render(values) if d["kind"] == "Deployment")["spec"]["template"]

    code, body = await _post_pod(api, ns, operator_template({}))
    assert code == 403 and "must be in the ranges" in body["message"]
    template = operator_template({"podSecurityContext": {"runAsUser": None, "runAsGroup": None}})
    assert template["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    code, pod = await _post_pod(api, ns, template)
    assert code == 201, pod.get("message")
    assert pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000680000
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


async def test_a_federation_refused_by_the_scc_is_degraded_and_platform_assigned_fixes_it(
    api, fake_ps, node_root
) -> None:
    """The SCC refuses the PS pod (10001 is outside the range): FailedCreate with its message; platformAssigned
    makes the Deployment controller's next pod pass."""
    meta = {"metadata": {"labels": RESTRICTED, "annotations": OPENSHIFT}}
    async with api.patch(f"/api/v1/namespaces/{NAMESPACE}", json=meta,
                         headers={"Content-Type": "application/merge-patch+json"}) as resp:  # fmt: skip
        assert resp.status == 200, await resp.text()
    image = "registry.example/geofed/ps:not-pulled"  # the container never starts: admission is what is tested
    async with Kubelet(api, node_root, missing_images=frozenset({image})):
        async with operator_running(_runner("cloud", fake_ps)) as runner:
            await watches_open(api, {"federations"})
            await create(api, {**FED, "spec": {**FED["spec"], "image": image}})

            def degraded() -> dict[str, Any] | None:
                status = (get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo") or {}).get("status") or {}
                return next((c for c in status.get("conditions") or [] if c["type"] == "Degraded"
                             and c["status"] == "True"), None)  # fmt: skip

            cond = await wait_for(degraded, 60, "Degraded")
            assert cond["reason"] == "FailedCreate"
            assert "unable to validate against any security context constraint" in cond["message"]
            assert "runAsUser: Invalid value: 10001" in cond["message"] and "OpenShift SCC" in cond["message"]
            await patch(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo",
                        {"spec": {"podSecurityContext": {"platformAssigned": True}}})  # fmt: skip
            pod_name = await wait_for(lambda: names_of(api, "v1/pods", NAMESPACE), 60, "an admitted PS pod")
            pod = get(api, "v1/pods", NAMESPACE, sorted(pod_name)[0])
            assert pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == 1000680000
            cond = await wait_for(lambda: (degraded() or {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"),
                                  60, "past admission")  # fmt: skip
    assert runner.exception is None
