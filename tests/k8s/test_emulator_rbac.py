"""RBAC and owner-reference permissions as a kube-apiserver enforces them, and the operator under the chart's RBAC.

Expected decisions follow the RBAC documentation (rules match apiGroups, resources including
`plural/subresource`, verbs and resourceNames; RoleBindings grant in their namespace only) and the
OwnerReferencesPermissionEnforcement admission plugin; the messages are the API server's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner

from geofed_operator.handlers import build_registry
from geofed_operator.handlers.deps import Deps
from geofed_operator.kube import resource_path
from geofed_operator.settings import OperatorSettings

from .conftest import NAMESPACE, FakePS, operator_running, use_kubeconfig, wait_for, watches_open, write_kubeconfig
from .emulator import GeofedEmulator
from .objects import call, create, get
from .test_chart import render
from .test_operator_federation import FED
from .test_operator_siteclient import CREDENTIAL, SITECLIENT

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
RBAC = "rbac.authorization.k8s.io/v1"
SA_NS = "ops"


@pytest.fixture()
def sa_token(api: GeofedEmulator) -> str:
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SA_NS}})
    api.seed({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot", "namespace": SA_NS}})
    return api.mint_token(SA_NS, "bot")


async def grant(api: GeofedEmulator, name: str, rules: list[dict[str, Any]], namespace: str | None = NAMESPACE,
                cluster_role: bool = False) -> None:  # fmt: skip
    """A Role (or ClusterRole) with `rules`, bound to ops/bot in `namespace` (cluster-wide when None)."""
    role_kind = "ClusterRole" if cluster_role or namespace is None else "Role"
    role_md: dict[str, Any] = {"name": name} | ({"namespace": namespace} if role_kind == "Role" else {})
    await create(api, {"apiVersion": RBAC, "kind": role_kind, "metadata": role_md, "rules": rules})
    binding_kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    binding_md: dict[str, Any] = {"name": name} | ({"namespace": namespace} if namespace else {})
    await create(api, {"apiVersion": RBAC, "kind": binding_kind, "metadata": binding_md,
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
                       "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": SA_NS}]})  # fmt: skip


def secret(name: str, ns: str = NAMESPACE) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "data": {}}


USER = "system:serviceaccount:ops:bot"


async def test_a_service_account_gets_only_what_its_bindings_allow(api: GeofedEmulator, sa_token: str) -> None:
    await create(api, secret("a"))
    await create(api, secret("b"))
    path = resource_path("v1", "Secret", NAMESPACE, "a")
    status, body = await call(api, "GET", path, token=sa_token)
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'secrets "a" is forbidden: User "{USER}" cannot get resource "secrets" in API group "" in the namespace '
        f'"{NAMESPACE}"'
    )
    await grant(
        api, "read-a", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["a"]}]
    )
    assert (await call(api, "GET", path, token=sa_token))[0] == 200
    assert (await call(api, "GET", resource_path("v1", "Secret", NAMESPACE, "b"), token=sa_token))[0] == 403
    status, body = await call(api, "GET", resource_path("v1", "Secret", NAMESPACE), token=sa_token)
    assert status == 403 and body["message"] == (
        f'secrets is forbidden: User "{USER}" cannot list resource "secrets" in API group "" in the namespace '
        f'"{NAMESPACE}"'
    )
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
    await create(api, secret("a", "elsewhere"))  # the RoleBinding grants in its own namespace only
    assert (await call(api, "GET", resource_path("v1", "Secret", "elsewhere", "a"), token=sa_token))[0] == 403
    status, body = await call(api, "GET", "/api/v1/namespaces", token=sa_token)
    assert status == 403 and body["message"].endswith(
        'cannot list resource "namespaces" in API group "" at the cluster scope'
    )


async def test_subresources_are_separate_resources(api: GeofedEmulator, sa_token: str) -> None:
    await create(api, FED)
    await grant(api, "feds", [{"apiGroups": ["geofed.io"], "resources": ["federations"], "verbs": ["get", "patch"]}])
    merge = "application/merge-patch+json"
    status_path = resource_path("geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", "status")
    status, body = await call(api, "PATCH", status_path, {"status": {"phase": "Running"}}, merge, token=sa_token)
    assert status == 403 and body["message"] == (
        f'federations.geofed.io "demo" is forbidden: User "{USER}" cannot patch resource "federations/status" in '
        f'API group "geofed.io" in the namespace "{NAMESPACE}"'
    )
    await grant(
        api, "fed-status", [{"apiGroups": ["geofed.io"], "resources": ["federations/status"], "verbs": ["patch"]}]
    )
    assert (await call(api, "PATCH", status_path, {"status": {"phase": "Running"}}, merge, token=sa_token))[0] == 200


async def test_tokens_authenticate_while_their_service_account_exists(api: GeofedEmulator, sa_token: str) -> None:
    assert (await call(api, "GET", "/api/v1/namespaces/default", token="not-a-token"))[0] == 401
    await grant(api, "ns", [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}], namespace=None)
    assert (await call(api, "GET", "/api/v1/namespaces/default", token=sa_token))[0] == 200
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    status, body = await call(api, "POST", "/api/v1/namespaces/ops/serviceaccounts/bot/token", request)
    assert status == 201
    assert (await call(api, "GET", "/api/v1/namespaces/default", token=body["status"]["token"]))[0] == 200
    await call(api, "DELETE", "/api/v1/namespaces/ops/serviceaccounts/bot")
    assert (await call(api, "GET", "/api/v1/namespaces/default", token=sa_token))[0] == 401


async def test_block_owner_deletion_needs_update_on_the_owners_finalizers(api: GeofedEmulator, sa_token: str) -> None:
    owner = await create(api, FED)
    ref = {"apiVersion": "geofed.io/v1alpha1", "kind": "Federation", "name": "demo", "uid": owner["metadata"]["uid"],
           "controller": True}  # fmt: skip
    await grant(api, "cms", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "patch"]}])
    cms = resource_path("v1", "ConfigMap", NAMESPACE)

    def cm(name: str, block: bool) -> dict[str, Any]:
        refs = [{**ref, "blockOwnerDeletion": block}]
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": refs}}

    status, body = await call(api, "POST", cms, cm("blocking", True), token=sa_token)
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        'configmaps "blocking" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource '
        "you can't set finalizers on: , <nil>"
    )
    assert (await call(api, "POST", cms, cm("plain", False), token=sa_token))[0] == 201
    patch = {"metadata": {"ownerReferences": []}}
    status, body = await call(api, "PATCH", f"{cms}/plain", patch, "application/merge-patch+json", token=sa_token)
    assert status == 403 and body["message"] == (
        'configmaps "plain" is forbidden: cannot set an ownerRef on a resource you can\'t delete: , <nil>'
    )
    await grant(
        api, "fin", [{"apiGroups": ["geofed.io"], "resources": ["federations/finalizers"], "verbs": ["update"]}]
    )
    assert (await call(api, "POST", cms, cm("blocking", True), token=sa_token))[0] == 201


# What each role's operator creates for one object, and the objects that make it do so.
LIVES: dict[str, tuple[list[dict[str, Any]], list[tuple[str, str]]]] = {
    "cloud": ([FED], [("apps/v1/deployments", "demo-ps"), ("v1/services", "demo-ps"),
                      ("v1/persistentvolumeclaims", "demo-checkpoints"), ("v1/secrets", "demo-tls")]),
    "site": ([CREDENTIAL, SITECLIENT], [("v1/secrets", "gpu0-token-1"), ("batch/v1/jobs", "gpu0-1")]),
}  # fmt: skip


@pytest.mark.parametrize("role", ["cloud", "site"])
async def test_the_operator_creates_its_children_under_the_charts_rbac(
    api: GeofedEmulator, fake_ps: FakePS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    """The chart's rendered RBAC (one watched namespace) is enough for the role's whole create path."""
    release_ns = "geofed-system"
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release_ns}})
    docs = render({"role": role, "watchNamespaces": [NAMESPACE]})
    wanted = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    for doc in (d for d in docs if d["kind"] in wanted):
        doc = copy.deepcopy(doc)
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            doc["metadata"].setdefault("namespace", release_ns)
        await create(api, doc)
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    token = api.mint_token(release_ns, account)
    use_kubeconfig(monkeypatch, write_kubeconfig(api, tmp_path / "operator-kubeconfig", token))

    settings = OperatorSettings(status_interval_s=0.3, site_interval_s=0.3, admin_timeout_s=2)
    deps = Deps(settings=settings, admin_factory=fake_ps.factory)
    runner = KopfRunner(["run", "--standalone", "-n", NAMESPACE], registry=build_registry(role, deps), timeout=30)
    inputs, children = LIVES[role]
    user = f"system:serviceaccount:{release_ns}:{account}"

    def refused() -> list[Any]:
        return [c for c in api.checks if c.user == user and not c.allowed]

    async with operator_running(runner):
        await watches_open(api, {"federations" if role == "cloud" else "siteclients"})
        for obj in inputs:
            await create(api, obj)
        await wait_for(lambda: all(get(api, key, NAMESPACE, name) for key, name in children) or refused(),
                       timeout=60, what="the children (or a refusal)")  # fmt: skip
        assert refused() == []
    owned = get(api, *children[-1][:1], NAMESPACE, children[-1][1])
    assert owned["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True  # what needs the finalizers grant
