"""helm (Helm 4's engine, through helm-python-sdk) installs, upgrades and uninstalls the chart on the emulator.

What must hold is what holds on a real cluster: install creates the release namespace and every
rendered object (server-side apply) plus the release record Secret; upgrade re-applies the new
rendering and records revision 2; uninstall deletes the objects and the release records.
"""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import helm_python as helm
import pytest

from .conftest import NAMESPACE, REPO
from .emulator import GeofedEmulator
from .objects import get, names_of

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
RELEASE_NS = "geofed-system"
VALUES: dict[str, Any] = {"role": "cloud", "watchNamespaces": [NAMESPACE]}
OBJECTS = [
    ("apps/v1/deployments", RELEASE_NS, "geofed"),
    ("v1/serviceaccounts", RELEASE_NS, "geofed"),
    ("v1/configmaps", RELEASE_NS, "geofed-settings"),
    ("rbac.authorization.k8s.io/v1/clusterroles", None, "geofed-geofed-system-cloud"),
    ("rbac.authorization.k8s.io/v1/clusterrolebindings", None, "geofed-geofed-system-cloud"),
    ("rbac.authorization.k8s.io/v1/roles", NAMESPACE, "geofed-geofed-system-cloud"),
    ("rbac.authorization.k8s.io/v1/rolebindings", NAMESPACE, "geofed-geofed-system-cloud"),
]


def releases(api: GeofedEmulator) -> set[str]:
    return {n for n in names_of(api, "v1/secrets", RELEASE_NS) if n.startswith("sh.helm.release.v1.geofed.")}


async def test_install_upgrade_uninstall_the_chart(api: GeofedEmulator) -> None:
    config = helm.Config(kubeconfig_path=os.environ["KUBECONFIG"], namespace=RELEASE_NS)
    chart = str(REPO / "charts/geofed")
    release = await asyncio.to_thread(config.install, chart, "geofed", VALUES, namespace=RELEASE_NS,
                                      create_namespace=True, timeout=60)  # fmt: skip
    assert release["status"] == "deployed" and release["revision"] == 1
    assert get(api, "v1/namespaces", None, RELEASE_NS)["status"]["phase"] == "Active"
    for key, ns, name in OBJECTS:
        assert get(api, key, ns, name) is not None, (key, ns, name)
    role = get(api, "rbac.authorization.k8s.io/v1/roles", NAMESPACE, "geofed-geofed-system-cloud")
    assert {"resources": ["federations/finalizers"], "verbs": ["update"], "apiGroups": ["geofed.io"]} in role["rules"]
    assert releases(api) == {"sh.helm.release.v1.geofed.v1"}
    record = get(api, "v1/secrets", RELEASE_NS, "sh.helm.release.v1.geofed.v1")
    assert record["type"] == "helm.sh/release.v1" and base64.b64decode(record["data"]["release"])
    assert record["metadata"]["labels"]["status"] == "deployed"

    upgraded = await asyncio.to_thread(config.upgrade, chart, "geofed", {**VALUES, "verbose": True},
                                       namespace=RELEASE_NS, timeout=60)  # fmt: skip
    assert upgraded["revision"] == 2 and upgraded["status"] == "deployed"
    assert releases(api) == {"sh.helm.release.v1.geofed.v1", "sh.helm.release.v1.geofed.v2"}
    assert (
        get(api, "v1/secrets", RELEASE_NS, "sh.helm.release.v1.geofed.v1")["metadata"]["labels"]["status"]
        == "superseded"
    )
    deployment = get(api, "apps/v1/deployments", RELEASE_NS, "geofed")
    assert deployment["metadata"]["generation"] == 2  # the new rendering changed the pod template

    await asyncio.to_thread(config.uninstall, "geofed", timeout=60)
    for key, ns, name in OBJECTS:
        assert get(api, key, ns, name) is None, (key, ns, name)
    assert releases(api) == set()


async def test_two_releases_of_one_name_in_two_namespaces_both_install(api: GeofedEmulator) -> None:
    """Cluster-scoped objects (ClusterRole, ClusterRoleBinding, ClusterKopfPeering) and those in a namespace both
    releases share (a watched namespace, the dashboards' namespace) carry the release namespace in their names:
    Helm refuses to install over an object another release owns."""
    values = {"role": "site", "replicas": 2, "grafana": {"dashboard": {"enabled": True, "namespace": NAMESPACE}}}
    chart = str(REPO / "charts/geofed")
    for ns in ("lab-a", "lab-b"):
        config = helm.Config(kubeconfig_path=os.environ["KUBECONFIG"], namespace=ns)
        release = await asyncio.to_thread(config.install, chart, "geofed", values, namespace=ns,
                                          create_namespace=True, timeout=60)  # fmt: skip
        assert release["status"] == "deployed", ns
    for ns in ("lab-a", "lab-b"):
        name = f"geofed-{ns}"
        binding = get(api, "rbac.authorization.k8s.io/v1/clusterrolebindings", None, f"{name}-site")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "geofed", "namespace": ns}]
        assert binding["roleRef"]["name"] == f"{name}-site"
        assert get(api, "kopf.dev/v1/clusterkopfpeerings", None, name) is not None
        args = get(api, "apps/v1/deployments", ns, "geofed")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--peering={name}" in args  # each release's replicas peer among themselves only
        assert get(api, "v1/configmaps", NAMESPACE, f"{name}-dashboard") is not None
