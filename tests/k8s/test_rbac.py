"""The chart's RBAC grants exactly the API calls the operator makes, per role, nothing cluster-wide it need not.

The operator runs a role's whole life cycle against the emulator (create, spec change, status polls,
relaunch, delete) while every request it sends (kopf's own included) is recorded; the chart is rendered
for that role and each recorded (group, resource, verb) must be granted, and each grant used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from .conftest import NAMESPACE, FakePS, operator_running, rolled_out_until, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get, patch
from .test_chart import render
from .test_operator_federation import FED
from .test_operator_federation import _runner as cloud_runner
from .test_operator_siteclient import CREDENTIAL, SITECLIENT
from .test_operator_siteclient import _runner as site_runner

Call = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)
# Grants the operator needs though no scenario here exercises them: kopf's namespace scan (cluster-wide
# mode) and CRD discovery, the PDB delete when a Federation turns podDisruptionBudget off, and the force
# delete of a client pod stuck terminating on a lost node (test_operator_siteclient_nodes.py).
UNEXERCISED: dict[str, set[Call]] = {
    "cloud": {("policy", "poddisruptionbudgets", "delete")},
    "site": {("", "pods", "delete")},
}
CLUSTER_READS = {("", "namespaces", v) for v in ("get", "list", "watch")} | {
    ("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("get", "list", "watch")
}


def operator_calls(api: GeofedEmulator) -> set[Call]:
    """What the operator (its Kube adapter and kopf, not the test) needed the authorizer to allow.

    The emulator's authorizer records each decision: a request's own verb (an apply that creates needs
    `create`), and the checks admission makes for it (`update` on an owner's `finalizers` to set
    blockOwnerDeletion).
    """
    return {
        (check.group, check.resource, check.verb)
        for check in api.checks
        if check.agent.startswith(("kopf", "OpenAPI-Gen"))
    }


def granted(docs: Iterable[dict[str, Any]], kinds: tuple[str, ...] = ("ClusterRole", "Role")) -> set[Call]:
    return {
        (group, res, verb)
        for d in docs
        if d["kind"] in kinds
        for rule in d["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
    }


async def _cloud_life(api: GeofedEmulator, fake_ps: FakePS) -> None:
    async with operator_running(cloud_runner("cloud", fake_ps)):
        await watches_open(api, {"federations"})
        await create(api, FED)
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="PS")
        # A status poll while the PS pod starts reads the pod's state.
        await wait_for(lambda: any(c.resource == "pods" for c in api.checks), what="a poll of the starting PS")
        await rolled_out_until(api, {"demo-ps"}, lambda: fake_ps.calls, "a status poll")
        await patch(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", {"spec": {"storage": {"size": "20Gi"}}})
        await wait_for(
            lambda: (
                get(api, "v1/persistentvolumeclaims", NAMESPACE, "demo-checkpoints")["spec"]["resources"]["requests"][
                    "storage"
                ]
                == "20Gi"
            ),
            what="PVC grown",
        )
        await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
        await wait_for(lambda: get(api, "geofed.io/v1alpha1/federations", NAMESPACE, "demo") is None, what="gone")


async def _site_life(api: GeofedEmulator, fake_ps: FakePS) -> None:
    async with operator_running(site_runner(fake_ps)):
        await watches_open(api, {"siteclients"})
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job 1")
        # Its pod preempted: the operator watches pods and keeps the reason on the Job.
        await watches_open(api, {"pods"})
        meta = {"name": "gpu0-1-pod", "namespace": NAMESPACE, "labels": job["spec"]["template"]["metadata"]["labels"]}
        spec = job["spec"]["template"]["spec"]
        await create(api, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "x"}
        await patch(api, "v1", "Pod", NAMESPACE, "gpu0-1-pod", {"status": {"conditions": [target]}}, status=True)
        await wait_for(
            lambda: "geofed.io/disruption" in (get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1")["metadata"].get(
                "annotations") or {}), what="the disruption kept on the Job")  # fmt: skip
        await delete(api, "v1", "Pod", NAMESPACE, "gpu0-1-pod")
        failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "x"}]}
        await patch(api, "batch/v1", "Job", NAMESPACE, job["metadata"]["name"], {"status": failed}, status=True)
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), what="Job 2")
        await wait_for(lambda: get(api, "v1/secrets", NAMESPACE, "gpu0-token-1") is None, what="token pruned")
        await delete(api, "geofed.io/v1alpha1", "SiteClient", NAMESPACE, "gpu0")
        await wait_for(lambda: get(api, "geofed.io/v1alpha1/siteclients", NAMESPACE, "gpu0") is None, what="gone")


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
@pytest.mark.parametrize("role", ["cloud", "site"])
async def test_chart_rbac_is_what_the_handlers_call(api, fake_ps, role: str) -> None:
    """Every call is granted; every namespaced grant is a call (or a documented, unexercised one)."""
    await (_cloud_life if role == "cloud" else _site_life)(api, fake_ps)
    calls = operator_calls(api)

    namespaced = render({"role": role, "watchNamespaces": [NAMESPACE]})
    roles, cluster = granted(namespaced, ("Role",)), granted(namespaced, ("ClusterRole",))
    assert cluster == CLUSTER_READS, "with watchNamespaces only discovery reads are cluster-wide"
    assert calls - CLUSTER_READS <= roles, f"calls the chart does not grant: {sorted(calls - CLUSTER_READS - roles)}"
    assert roles - calls <= UNEXERCISED[role], f"grants no call needs: {sorted(roles - calls - UNEXERCISED[role])}"

    clusterwide = granted(render({"role": role}))
    assert clusterwide == roles | CLUSTER_READS  # the same rules, in one ClusterRole


def test_role_both_grants_the_union_of_cloud_and_site() -> None:
    """`role: both` (the default, for one test cluster) is exactly the two roles together."""

    def rules(role: str) -> set[Call]:
        return granted(render({"role": role, "watchNamespaces": [NAMESPACE]}), ("Role",))

    assert rules("both") == rules("cloud") | rules("site")
