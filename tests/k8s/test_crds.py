"""The CRDs: generated from the pydantic models, current, structural, valid, and validating for real."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from geofed.config import FederationConfig
from geofed_operator.crds import all_crds, peering_crds
from geofed_operator.federation_spec import parse_federation_spec, spec_to_federation_config
from geofed_operator.generate import generated_files, stale_files
from geofed_operator.keys import camel, from_k8s_keys, k8s_dump, to_k8s_keys
from geofed_operator.siteclient_spec import parse_siteclient_spec

REPO = Path(__file__).resolve().parents[2]
KUBE_VERSION = "1.32.0"


def _schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / f"geofed.io_{plural}.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _validate(plural: str, obj: dict[str, Any]) -> None:
    """OpenAPI 3.0 schemas use draft-4 style boolean exclusiveMinimum/Maximum."""
    jsonschema.Draft4Validator(_schema(plural)).validate(obj)


def _examples() -> list[dict[str, Any]]:
    docs = []
    for name in ("federation.yaml", "site.yaml", "networkpolicy.yaml"):
        docs += [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]
    return docs


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("token_ttl_s", "tokenTTLSeconds"),
        ("rate_limit_per_s", "rateLimitPerSecond"),
        ("sync_interval_s", "syncIntervalSeconds"),
        ("n_embd", "nEmbd"),
        ("tls_secret_name", "tlsSecretName"),
        ("client_ca", "clientCA"),
        ("model", "model"),
    ],
)
def test_camel_case_names_follow_kubernetes_conventions(name: str, key: str) -> None:
    assert camel(name) == key


def test_generated_files_are_current() -> None:
    """`python -m geofed_operator.generate` leaves nothing to change (CRDs, chart schema, values, dashboard)."""
    assert stale_files() == [], "run `python -m geofed_operator.generate`"


def test_chart_crds_are_the_crds() -> None:
    chart = sorted(p.name for p in (REPO / "charts/geofed/crds").glob("*.yaml"))
    expected = sorted({**all_crds(), **peering_crds()})
    assert chart == sorted(p.name for p in (REPO / "crds").glob("*.yaml")) == expected
    for name in chart:
        assert (REPO / "charts/geofed/crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes()
    assert all(path.parts[0] in ("crds", "charts") for path in generated_files())


@pytest.mark.parametrize("name", sorted(all_crds()))
def test_crd_passes_kubernetes_validate_strict(name: str) -> None:
    crd = yaml.safe_load((REPO / "crds" / name).read_text())
    kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)


def _walk(node: dict[str, Any], path: str = "$") -> list[str]:
    """Violations of the structural-schema rules the API server enforces."""
    problems = []
    if "$ref" in node or "allOf" in node or "oneOf" in node or "not" in node:
        problems.append(f"{path}: $ref/allOf/oneOf/not")
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: no type")
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: anyOf")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{path}: numeric {key} (OpenAPI 3.0 wants a boolean)")
    for key, sub in (node.get("properties") or {}).items():
        problems += _walk(sub, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            problems += _walk(node[key], f"{path}[{key}]")
    return problems


@pytest.mark.parametrize("plural", ["federations", "siteclients"])
def test_schemas_are_structural(plural: str) -> None:
    schema = copy.deepcopy(_schema(plural))
    schema["properties"]["metadata"].setdefault("type", "object")
    assert _walk(schema) == []


def test_crd_names_columns_and_status_subresource() -> None:
    crds = {c["spec"]["names"]["plural"]: c for c in all_crds().values()}
    columns = {p: [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"] if not c.get("priority")]
               for p, crd in crds.items()}  # fmt: skip
    assert columns == {
        "federations": ["Phase", "Ready", "Reason", "Version", "Clients", "Groups", "Loss", "Age"],
        "siteclients": ["Phase", "Ready", "Reason", "Federation", "Restarts", "Last Sync", "Age"],
    }
    for crd in crds.values():
        version = crd["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        assert {"conditions", "observedGeneration", "phase"} <= set(status)
        assert crd["spec"]["names"]["shortNames"]


def test_immutable_fields_carry_cel_transition_rules() -> None:
    fed = _schema("federations")["properties"]["spec"]["properties"]
    sc = _schema("siteclients")["properties"]["spec"]["properties"]
    for node in (
        fed["model"],
        fed["paradigm"],
        fed["storage"]["properties"]["storageClassName"],
        sc["site"],
        sc["federation"],
    ):
        assert "self == oldSelf" in [r["rule"] for r in node["x-kubernetes-validations"]]


def test_federation_schema_mirrors_the_config_models() -> None:
    """Every FederationConfig field (but name) is in the spec with its default and bounds."""
    spec = _schema("federations")["properties"]["spec"]["properties"]
    for section in ("model", "aggregation", "codec", "training"):
        model = type(getattr(FederationConfig(), section))
        props = spec[section]["properties"]
        assert set(props) == {camel(f) for f in model.model_fields}
    momentum = spec["aggregation"]["properties"]["momentum"]
    assert (momentum["minimum"], momentum["maximum"], momentum["exclusiveMaximum"], momentum["default"]) == (
        0,
        1,
        True,
        0.9,
    )
    assert spec["aggregation"]["properties"]["mode"]["enum"] == ["sync", "async", "auto"]
    assert spec["aggregation"]["properties"]["globalLr"]["description"].startswith("Global (outer) learning rate")


def test_spec_maps_back_to_federation_config() -> None:
    spec = {"aggregation": {"mode": "sync", "stragglerTimeoutSeconds": 45}, "training": {"syncIntervalSeconds": 600}}
    cfg = spec_to_federation_config(spec, name="demo")
    assert (cfg.name, cfg.aggregation.mode, cfg.aggregation.straggler_timeout_s, cfg.training.sync_interval_s) == (
        "demo",
        "sync",
        45,
        600,
    )
    dumped = to_k8s_keys(FederationConfig, cfg.model_dump(mode="json"))
    assert FederationConfig.model_validate(from_k8s_keys(FederationConfig, dumped)) == cfg


@pytest.mark.parametrize("doc", _examples(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_examples_are_valid(doc: dict[str, Any]) -> None:
    """Custom objects against the CRDs' own schemas and models; built-ins against Kubernetes."""
    if doc["kind"] == "Federation":
        _validate("federations", doc)
        parse_federation_spec(doc["spec"])
    elif doc["kind"] == "SiteClient":
        _validate("siteclients", doc)
        parse_siteclient_spec(doc["spec"])
    else:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def _fed(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "geofed.io/v1alpha1", "kind": "Federation", "metadata": {"name": "x"}, "spec": spec}


def _site(**overrides: Any) -> dict[str, Any]:
    spec = {
        "federation": "demo",
        "site": "uw",
        "psAddress": "ps.example.org:7443",
        "credentialSecretRef": {"name": "cred"},
        "data": {"pvc": {"claimName": "data"}},
        **overrides,
    }
    return {"apiVersion": "geofed.io/v1alpha1", "kind": "SiteClient", "metadata": {"name": "x"}, "spec": spec}


@pytest.mark.parametrize(
    "obj",
    [
        _fed(aggregation={"momentum": 1.0}),  # exclusive maximum
        _fed(aggregation={"mode": "gossip"}),  # enum
        _fed(aggregation={"globalLr": 0}),  # exclusive minimum
        _fed(model={"nLayer": 0}),  # minimum
        _fed(codec={"name": "fp8"}),
        _fed(service={"type": "ExternalName"}),
        _fed(service={"port": 70000}),
        _fed(storage={"size": "lots"}),  # quantity pattern
        _fed(training={"batchSize": "16"}),  # type
        _site(site="UW_Madison"),  # DNS label
        _site(psAddress="no-port"),
        _site(gpusPerPod=-1),
        _site(resources={"limits": {"memory": "8 GB"}}),
        {**_site(), "spec": {k: v for k, v in _site()["spec"].items() if k != "credentialSecretRef"}},
    ],
)
def test_bad_objects_are_rejected_by_the_schema(obj: dict[str, Any]) -> None:
    plural = "federations" if obj["kind"] == "Federation" else "siteclients"
    with pytest.raises(jsonschema.ValidationError):
        _validate(plural, obj)


@pytest.mark.parametrize(
    ("parse", "spec", "message"),
    [
        (parse_federation_spec, {"model": {"nEmbd": 130, "nHead": 4}}, "divisible"),
        (parse_federation_spec, {"tlsSecretName": "x", "insecure": True}, "exclude"),
        (
            parse_siteclient_spec,
            _site(data={"pvc": {"claimName": "a"}, "hostPath": {"path": "/d"}})["spec"],
            "exactly one",
        ),
        (parse_siteclient_spec, _site(data={})["spec"], "exactly one"),
        (parse_siteclient_spec, _site(insecure=True, caSecretRef={"name": "c"})["spec"], "exclude"),
        (parse_siteclient_spec, _site(bogus=1)["spec"], "Extra inputs"),
    ],
)
def test_cross_field_rules_are_enforced_by_the_models(parse: Any, spec: dict[str, Any], message: str) -> None:
    """Rules the API server checks with CEL are checked by the models too (same wording)."""
    with pytest.raises(ValidationError, match=message):
        parse(spec)


def test_defaults_round_trip_through_k8s_dump() -> None:
    spec = parse_siteclient_spec(_site()["spec"])
    assert parse_siteclient_spec(k8s_dump(spec)) == spec


@pytest.mark.parametrize(
    ("plural", "first_row"), [("federations", "gpt2-demo "), ("siteclients", "uw-madison-client ")]
)
def test_the_docs_sample_tables_show_the_columns_kubectl_prints(plural: str, first_row: str) -> None:
    """`kubectl get` prints NAME and every priority-0 printer column, upper-cased: the docs' samples must too."""
    crd = yaml.safe_load((REPO / "crds" / f"geofed.io_{plural}.yaml").read_text())
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    printed = ["NAME"] + [c["name"].upper() for c in columns if not c.get("priority")]
    lines = (REPO / "docs/kubernetes.md").read_text().splitlines()
    header = next(lines[i - 1] for i, line in enumerate(lines) if line.startswith(first_row) and i)
    assert re.split(r"\s{2,}", header.strip()) == printed
