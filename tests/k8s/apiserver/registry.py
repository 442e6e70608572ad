"""The resource types the emulated API server serves: built-ins it is told about, and CRDs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml


@dataclasses.dataclass
class ResourceType:
    """One served resource (a group/version/plural) and what the API server knows of it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: set[str] = dataclasses.field(default_factory=set)
    singular: str = ""
    short_names: list[str] = dataclasses.field(default_factory=list)
    categories: list[str] = dataclasses.field(default_factory=list)
    crd: dict[str, Any] | None = None  # the CustomResourceDefinition, for custom resources
    schema: dict[str, Any] | None = None  # the version's openAPIV3Schema, for custom resources
    columns: list[dict[str, Any]] | None = None  # additionalPrinterColumns
    name_format: str = "subdomain"  # how metadata.name is validated: subdomain, label (1123) or 1035

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`group/version/plural` (`v1/secrets` for the core group), the form kmock and the tests use."""
        return f"{self.api_version}/{self.plural}"

    @property
    def custom(self) -> bool:
        return self.crd is not None


# (apiVersion, plural): (kind, namespaced, subresources, name format)
BUILTINS: dict[tuple[str, str], tuple[str, bool, set[str], str]] = {
    ("v1", "secrets"): ("Secret", True, set(), "subdomain"),
    ("v1", "configmaps"): ("ConfigMap", True, set(), "subdomain"),
    ("v1", "services"): ("Service", True, {"status"}, "1035"),
    ("v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True, {"status"}, "subdomain"),
    ("v1", "pods"): ("Pod", True, {"status", "log", "eviction"}, "subdomain"),
    ("v1", "events"): ("Event", True, set(), "subdomain"),
    ("v1", "serviceaccounts"): ("ServiceAccount", True, {"token"}, "subdomain"),
    ("v1", "resourcequotas"): ("ResourceQuota", True, {"status"}, "subdomain"),
    ("v1", "limitranges"): ("LimitRange", True, set(), "subdomain"),
    ("v1", "namespaces"): ("Namespace", False, {"status", "finalize"}, "label"),
    ("apps/v1", "deployments"): ("Deployment", True, {"status", "scale"}, "subdomain"),
    ("batch/v1", "jobs"): ("Job", True, {"status"}, "subdomain"),
    ("policy/v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True, {"status"}, "subdomain"),
    ("networking.k8s.io/v1", "networkpolicies"): ("NetworkPolicy", True, set(), "subdomain"),
    ("coordination.k8s.io/v1", "leases"): ("Lease", True, set(), "subdomain"),
    ("rbac.authorization.k8s.io/v1", "roles"): ("Role", True, set(), "path"),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): ("RoleBinding", True, set(), "path"),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): ("ClusterRole", False, set(), "path"),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): ("ClusterRoleBinding", False, set(), "path"),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions"): (
        "CustomResourceDefinition",
        False,
        {"status"},
        "subdomain",
    ),
}
SHORT_NAMES = {"configmaps": ["cm"], "services": ["svc"], "persistentvolumeclaims": ["pvc"], "pods": ["po"],
               "serviceaccounts": ["sa"], "namespaces": ["ns"], "deployments": ["deploy"], "events": ["ev"],
               "poddisruptionbudgets": ["pdb"], "resourcequotas": ["quota"], "networkpolicies": ["netpol"],
               "limitranges": ["limits"], "customresourcedefinitions": ["crd", "crds"]}  # fmt: skip


def builtin_types() -> list[ResourceType]:
    types = []
    for (api_version, plural), (kind, namespaced, subresources, name_format) in BUILTINS.items():
        group, _, version = api_version.rpartition("/")
        types.append(
            ResourceType(group, version, plural, kind, namespaced, set(subresources), kind.lower(),
                         SHORT_NAMES.get(plural, []), name_format=name_format)
        )  # fmt: skip
    return types


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    """One type per served version of a CustomResourceDefinition."""
    spec, names = crd["spec"], crd["spec"]["names"]
    return [
        ResourceType(
            group=spec["group"],
            version=version["name"],
            plural=names["plural"],
            kind=names["kind"],
            namespaced=spec["scope"] == "Namespaced",
            subresources=set(version.get("subresources") or {}),
            singular=names.get("singular") or names["kind"].lower(),
            short_names=list(names.get("shortNames") or []),
            categories=list(names.get("categories") or []),
            crd=crd,
            schema=(version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"},
            columns=version.get("additionalPrinterColumns"),
        )
        for version in spec["versions"]
        if version.get("served", True)
    ]


def load_crds(crd_dir: Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted(crd_dir.glob("*.yaml"))]


class Registry:
    """Resource types by (group, version, plural) and by (group, kind)."""

    def __init__(self) -> None:
        self.types: dict[tuple[str, str, str], ResourceType] = {}

    def add(self, rtype: ResourceType) -> None:
        self.types[rtype.group, rtype.version, rtype.plural] = rtype

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rtype in self.types.values():
            if rtype.group == group and rtype.version == version and rtype.kind == kind:
                return rtype
        return None

    def by_plural(self, plural: str, group: str | None = None) -> list[ResourceType]:
        return [t for t in self.types.values() if t.plural == plural and (group is None or t.group == group)]
