"""The Helm chart: strict lint, renders for every role, every manifest valid for Kubernetes 1.32."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from geofed_operator.chart_values import ChartValues
from geofed_operator.dashboard import METRICS
from geofed_operator.keys import k8s_dump

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts/geofed"
KUBE_VERSION = "1.32.0"
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cloud": {"role": "cloud", "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
              "grafana": {"dashboard": {"enabled": True}}},
    "site": {"role": "site", "watchNamespaces": ["lab-a", "lab-b"], "verbose": True,
             "settings": {"siteIntervalSeconds": 5}, "tolerations": [{"key": "infra", "operator": "Exists"}]},
}  # fmt: skip


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(str(CHART))
    out = chart.render(values, name="geofed", namespace="geofed-system", is_install=True)
    return [doc for path, text in out.items() if path.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_strict(variant: str) -> None:
    report = helm.lint(str(CHART), VARIANTS[variant], strict=True, namespace="geofed-system", kube_version="v1.32.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_manifests_are_valid(variant: str) -> None:
    docs = render(VARIANTS[variant])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            spec = doc["spec"]  # no schema ships with kubernetes-validate: check the shape that matters
            assert spec["selector"] == {"matchLabels": {"app.kubernetes.io/name": "geofed-ps"}}
            assert spec["endpoints"][0]["port"] == "metrics"
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def _rules(docs: list[dict[str, Any]]) -> set[str]:
    return {
        f"{group or 'core'}/{res}"
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d["rules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
    }


def test_rbac_is_least_privilege_per_role() -> None:
    cloud, site = _rules(render({"role": "cloud"})), _rules(render({"role": "site"}))
    assert {"apps/deployments", "core/services", "core/persistentvolumeclaims", "geofed.io/federations"} <= cloud
    assert not {"batch/jobs", "geofed.io/siteclients"} & cloud
    cloud_pods = [r for d in render({"role": "cloud"}) if d["kind"] == "ClusterRole" for r in d["rules"]
                  if "pods" in r["resources"]]  # fmt: skip
    assert [r["verbs"] for r in cloud_pods] == [["list"]]  # reads its PS pod's state, never watches or changes pods
    assert {"batch/jobs", "core/pods", "core/secrets", "geofed.io/siteclients/status"} <= site
    assert not {"apps/deployments", "core/services", "geofed.io/federations"} & site


def test_namespaced_install_binds_roles_per_namespace() -> None:
    docs = render(VARIANTS["site"])
    roles = sorted((d["kind"], d["metadata"]["namespace"]) for d in docs if d["kind"] in ("Role", "RoleBinding"))
    assert roles == [("Role", "lab-a"), ("Role", "lab-b"), ("RoleBinding", "lab-a"), ("RoleBinding", "lab-b")]
    cluster = next(d for d in docs if d["kind"] == "ClusterRole")
    assert {r for rule in cluster["rules"] for r in rule["resources"]} == {"customresourcedefinitions", "namespaces"}
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["operator", "--role=site"] and "--namespace=lab-a" in args and "--verbose" in args
    settings = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings"))
    assert yaml.safe_load(settings["data"]["settings.yaml"])["siteIntervalSeconds"] == 5


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"role": "edge"}, "role"),
        ({"surprise": True}, "surprise"),
        ({"settings": {"siteIntervalSeconds": 0}}, "siteIntervalSeconds"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"watchNamespaces": "default"}, "watchNamespaces"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], match: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=match):
        helm.Chart.load(str(CHART)).validate_schema(values)


def test_values_yaml_is_the_model_defaults_and_versions_agree() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values == k8s_dump(ChartValues())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version == values["image"]["tag"]
    for image in (values["settings"]["psImage"], values["settings"]["clientImage"]):
        assert image.endswith(f":{version}")


def test_dashboard_shows_the_papers_panels_from_exported_metrics() -> None:
    docs = render(VARIANTS["cloud"])
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard"))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["geofed.json"])
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    used = {m.removesuffix("_bucket") for e in exprs for m in re.findall(r"\b(geofed_[a-z_]+)", e)}
    assert used <= METRICS and used == METRICS  # every exported metric is shown, no invented one
    titles = " | ".join(p["title"] for p in panels).lower()
    for want in ("bytes received", "bytes sent", "throughput", "round-trip", "compression", "train loss",
                 "eval loss", "contribution"):  # fmt: skip
        assert want in titles
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_chart_ships_the_crds() -> None:
    crds = helm.Chart.load(str(CHART)).crds
    shipped = {Path(c["name"]).name: c["data"] for c in crds}
    assert shipped == {p.name: p.read_text() for p in (REPO / "crds").glob("*.yaml")}


def _notes(values: dict[str, Any]) -> str:
    out = helm.Chart.load(str(CHART)).render(values, name="geofed", namespace="geofed-system", is_install=True)
    return out["geofed/templates/NOTES.txt"]


@pytest.mark.parametrize("role", ["cloud", "site", "both"])
def test_no_role_may_list_or_watch_secrets(role: str) -> None:
    """The operator reads Secrets by name only: a cluster-wide list would read every Secret in the cluster."""
    for doc in render({"role": role}):
        if doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                if "secrets" in rule["resources"]:
                    assert not {"list", "watch"} & set(rule["verbs"]), (role, rule)


def test_pod_labels_cannot_override_the_selector() -> None:
    """A podLabels entry named like a selector label would orphan the Deployment's pods: it is left out."""
    docs = render({"podLabels": {"app.kubernetes.io/instance": "other", "app.kubernetes.io/name": "x", "team": "ml"}})
    dep = next(d for d in docs if d["kind"] == "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels["team"] == "ml" and labels["app.kubernetes.io/instance"] == "geofed"


def test_an_existing_service_account_must_be_named() -> None:
    """serviceAccount.create=false without a name fails rendering instead of binding the roles to `default`."""
    with pytest.raises(helm.HelmRenderError, match="serviceAccount.name is required"):
        render({"serviceAccount": {"create": False}})
    docs = render({"serviceAccount": {"create": False, "name": "ops"}})
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "ops" and not [d for d in docs if d["kind"] == "ServiceAccount"]


@pytest.mark.parametrize(("role", "monitors"), [("site", 0), ("cloud", 1), ("both", 1)])
def test_only_a_role_that_runs_a_ps_renders_its_service_monitor(role: str, monitors: int) -> None:
    docs = render({"role": role, "metrics": {"serviceMonitor": {"enabled": True}}})
    assert len([d for d in docs if d["kind"] == "ServiceMonitor"]) == monitors


def test_notes_enrol_command_is_the_documented_one() -> None:
    """NOTES.txt's enrol command names the certificate (--server-name) and says how to pick the master site."""
    notes = _notes({"role": "cloud"})
    assert "--server-name <federation>-ps.<namespace>.svc" in notes and "--master" in notes
    assert "ca.crt" in notes.split("geofed site enroll")[0]  # the CA it passes is fetched first
    assert "geofed site enroll" not in _notes({"role": "site"})


@pytest.mark.parametrize("gpus", [2, 0])
def test_notes_enrol_command_sets_the_gpus_per_client_pod(gpus: int) -> None:
    """The enrol command, placeholders filled in, is one `geofed site enroll` accepts, with the GPU count given;
    the notes say which count is the CPU case."""
    from geofed_apps.cli import build_parser

    notes = _notes({"role": "cloud"})
    lines = notes[notes.index("geofed site enroll"):].splitlines()
    command = " ".join(line.strip().rstrip("\\") for line in lines[: next(i for i, line in enumerate(lines)
                                                                           if not line.endswith("\\")) + 1])
    filled = re.sub(r"<gpus-per-client-pod>", str(gpus), command)
    filled = re.sub(r"<[^>]+>", "x", filled)
    args = build_parser().parse_args(shlex.split(filled)[1:])
    assert args.gpus == gpus and args.site == "x"
    assert "--gpus 0 for a site that trains\n  on CPU" in notes


def test_notes_warn_about_cluster_wide_secret_access_unless_namespaces_are_listed() -> None:
    assert "watchNamespaces to confine it" in _notes({})
    assert "watchNamespaces to confine it" not in _notes({"watchNamespaces": ["lab-a"]})
