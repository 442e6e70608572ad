"""The CRDs' CEL rules (`x-kubernetes-validations`) compile and accept/refuse what they should.

No API server runs here; `cel-python` evaluates the same expressions the API server would, on the
node each rule is attached to (with defaults filled in, as the API server does before validating).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENV = celpy.Environment()


def _spec_schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / f"geofed.io_{plural}.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _node(plural: str, path: str) -> dict[str, Any]:
    node = _spec_schema(plural)
    for part in filter(None, path.split(".")):
        node = node["properties"][part]
    return node


def _all_rules(node: dict[str, Any]) -> list[str]:
    rules = [r["rule"] for r in node.get("x-kubernetes-validations", [])]
    for sub in (node.get("properties") or {}).values():
        rules += _all_rules(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            rules += _all_rules(node[key])
    return rules


def check(plural: str, path: str, value: Any, old: Any = None) -> bool:
    """Whether every rule on the node at `path` accepts `value` (transition rules only with `old`)."""
    ok = True
    for rule in _node(plural, path).get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"] and old is None:
            continue
        activation = {"self": celpy.json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = ENV.program(ENV.compile(rule["rule"])).evaluate(activation)
        ok = ok and bool(result)
    return ok


@pytest.mark.parametrize("plural", ["federations", "siteclients"])
def test_every_rule_compiles(plural: str) -> None:
    rules = _all_rules(_spec_schema(plural))
    assert rules
    for rule in rules:
        ENV.compile(rule)


MODEL = {"family": "gpt2", "nLayer": 2, "nHead": 4, "nEmbd": 128, "vocabSize": 257, "blockSize": 128, "seed": 0}
SITE = {"insecure": False, "site": "uw"}


@pytest.mark.parametrize(
    ("plural", "path", "value", "old", "accepted"),
    [
        ("federations", "model", MODEL, None, True),
        ("federations", "model", {**MODEL, "nEmbd": 130}, None, False),
        ("federations", "model", MODEL, MODEL, True),
        ("federations", "model", {**MODEL, "nLayer": 12}, MODEL, False),  # immutable
        ("federations", "paradigm", "pretrain", "pretrain", True),
        ("federations", "groups", [{"name": "us-east"}], [{"name": "us-east"}], True),
        ("federations", "groups", [{"name": "us-east"}, {"name": "eu-west"}], [{"name": "us-east"}], False),
        ("federations", "storage.storageClassName", "fast", "standard", False),
        ("federations", "storage", {"storageClassName": "fast"}, {"size": "10Gi"}, False),  # unset -> set
        ("federations", "storage", {"size": "10Gi"}, {"storageClassName": "fast"}, False),  # set -> unset
        ("federations", "storage", {"size": "20Gi", "storageClassName": "f"}, {"storageClassName": "f"}, True),
        ("siteclients", "data.hostPath", {"path": "/"}, None, False),
        ("siteclients", "data.hostPath", {"path": "/data/../etc"}, None, False),
        ("siteclients", "data.hostPath", {"path": "/data/corpus"}, None, True),
        ("federations", "service", {"type": "ClusterIP", "port": 7443}, None, True),
        ("federations", "service", {"type": "ClusterIP", "nodePort": 30443}, None, False),
        ("federations", "service", {"type": "NodePort", "nodePort": 30443}, None, True),
        ("siteclients", "", {**SITE, "caSecretRef": {"name": "c", "key": "ca.crt"}}, None, True),
        ("siteclients", "", {**SITE, "insecure": True, "caSecretRef": {"name": "c", "key": "ca.crt"}}, None, False),
        ("siteclients", "data", {"pvc": {"claimName": "d"}}, None, True),
        ("siteclients", "data", {"hostPath": {"path": "/d"}}, None, True),
        ("siteclients", "data", {"pvc": {"claimName": "d"}, "hostPath": {"path": "/d"}}, None, False),
        ("siteclients", "data", {}, None, False),
        ("siteclients", "site", "uw", "uw", True),
        ("siteclients", "site", "mit", "uw", False),  # immutable
        ("siteclients", "federation", "other", "demo", False),  # immutable
    ],
)
def test_rule_semantics(plural: str, path: str, value: Any, old: Any, accepted: bool) -> None:
    assert check(plural, path, value, old) is accepted


def _root_rules(plural: str) -> list[str]:
    crd = yaml.safe_load((REPO / "crds" / f"geofed.io_{plural}.yaml").read_text())
    return [r["rule"] for r in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]]


@pytest.mark.parametrize(
    ("plural", "name", "accepted"),
    [
        ("federations", "gpt2-demo", True),
        ("federations", "7b-llama", False),  # its Service 7b-llama-ps would be refused
        ("federations", "gpt2.demo", False),
        ("siteclients", "uw-madison-client", True),
        ("siteclients", "uw.client", False),
    ],
)
def test_names_that_would_give_invalid_children_are_refused(plural: str, name: str, accepted: bool) -> None:
    """Rules on the object's root see metadata.name, as the API server's do."""
    activation = {"self": celpy.json_to_cel({"metadata": {"name": name}, "spec": {}})}
    results = [bool(ENV.program(ENV.compile(rule)).evaluate(activation)) for rule in _root_rules(plural)]
    assert all(results) is accepted


@pytest.mark.parametrize(
    ("spec", "accepted"),
    [
        ({"gpusPerPod": 1}, True),
        ({"gpusPerPod": 2, "procsPerPod": 2}, True),
        ({"gpusPerPod": 4, "procsPerPod": 1}, True),
        ({"gpusPerPod": 0, "procsPerPod": 4}, True),  # CPU ranks
        ({"gpusPerPod": 1, "procsPerPod": 2}, False),  # a process without a GPU of its own
        ({"gpusPerPod": 2, "procsPerPod": 8}, False),
    ],
)
def test_siteclient_processes_within_its_gpus(spec: dict[str, Any], accepted: bool) -> None:
    # The spec as the API server validates it: defaults (insecure) filled in.
    assert check("siteclients", "", {"insecure": False, **spec}) is accepted
