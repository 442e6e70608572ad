"""Crafted objects against the CRDs as an API server admits them: structural schema, then CEL on the defaulted object.

Every invalid object here is refused at admission (by a pattern, a bound or a CEL rule) with a message
that names the problem; every valid one is admitted. The schema part is JSON Schema draft 4 (OpenAPI
3.0's boolean exclusiveMinimum); the CEL part evaluates each `x-kubernetes-validations` rule with
cel-python on the node it is attached to, after filling in the schema's defaults as the API server does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from geofed_operator.federation_spec import parse_federation_spec
from geofed_operator.siteclient_spec import parse_siteclient_spec

REPO = Path(__file__).resolve().parents[2]
ENV = celpy.Environment()


def _schema(plural: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / f"geofed.io_{plural}.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _defaulted(schema: dict[str, Any], value: Any) -> Any:
    """`value` with the schema's defaults filled in wherever a property is absent (objects and arrays)."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for key, sub in schema["properties"].items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = _defaulted(sub, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_defaulted(schema["items"], v) for v in value]
    return value


def _cel_errors(schema: dict[str, Any], value: Any, old: Any, path: str) -> list[str]:
    errors = []
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"] and old is None:
            continue  # a transition rule runs on updates only
        activation = {"self": celpy.json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = celpy.json_to_cel(old)
        if not bool(ENV.program(ENV.compile(rule["rule"])).evaluate(activation)):
            errors.append(f"{path or '<root>'}: {rule.get('message', rule['rule'])}")
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                old_sub = old.get(key) if isinstance(old, dict) else None
                errors += _cel_errors(sub, value[key], old_sub, f"{path}.{key}".lstrip("."))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += _cel_errors(schema["items"], item, None, f"{path}[{i}]")
    return errors


def admit(plural: str, obj: dict[str, Any]) -> list[str]:
    """The API server's reasons to refuse a create of `obj` (empty: admitted)."""
    schema = _schema(plural)
    refused = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in jsonschema.Draft4Validator(schema)
               .iter_errors(obj)]  # fmt: skip
    if refused:
        return refused
    return _cel_errors(schema, _defaulted(schema, obj), None, "")


def _fed(name: str = "demo", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "geofed.io/v1alpha1", "kind": "Federation",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec}  # fmt: skip


SITE_SPEC = {"federation": "demo", "site": "uw", "psAddress": "ps.example.org:7443",
             "credentialSecretRef": {"name": "uw-credential"}, "data": {"pvc": {"claimName": "uw-data"}}}  # fmt: skip


def _site(name: str = "gpu0", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "geofed.io/v1alpha1", "kind": "SiteClient",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {**SITE_SPEC, **spec}}  # fmt: skip


INVALID = [
    ("fed dnsName with spaces", _fed(tls={"dnsNames": ["not a name!"]}), "does not match"),
    ("fed dnsName upper case", _fed(tls={"dnsNames": ["PS.Example.org"]}), "does not match"),
    ("fed dnsName double wildcard", _fed(tls={"dnsNames": ["*.*.example.org"]}), "does not match"),
    ("fed dnsName trailing dot label", _fed(tls={"dnsNames": ["ps..example.org"]}), "does not match"),
    (
        "fed dnsName too long",
        _fed(tls={"dnsNames": ["a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 63]}),
        "is too long",
    ),
    ("fed ipAddress a name", _fed(tls={"ipAddresses": ["lb.example.org"]}), "does not match"),
    ("fed ipAddress octet > 255", _fed(tls={"ipAddresses": ["203.0.113.300"]}), "does not match"),
    ("fed name 64 chars", _fed("f" * 64), "at most 63 characters"),
    ("fed name starting with a digit", _fed("7b-llama"), "start with a letter"),
    ("fed service port 70000", _fed(service={"port": 70000}), "maximum"),
    ("fed nodePort without NodePort", _fed(service={"type": "ClusterIP", "nodePort": 30443}), "nodePort"),
    ("site psAddress port 99999", _site(psAddress="ps.example.org:99999"), "does not match"),
    ("site psAddress port 65536", _site(psAddress="ps.example.org:65536"), "does not match"),
    ("site psAddress port 0", _site(psAddress="ps.example.org:0"), "does not match"),
    ("site psAddress without port", _site(psAddress="ps.example.org"), "does not match"),
    ("site psAddress with a scheme", _site(psAddress="https://ps.example.org:7443"), "does not match"),
    ("site name 64 chars", _site("s" * 64), "at most 63 characters"),
    ("site name with a dot", _site("uw.client"), "a-z, 0-9 and '-'"),
    ("site site upper case", _site(site="UW"), "does not match"),
    ("site no data source", _site(data={}), "exactly one of data.pvc and data.hostPath"),
    ("site insecure with a CA", _site(insecure=True, caSecretRef={"name": "c"}), "exclude each other"),
    (
        "site env value and valueFrom",
        _site(env=[{"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
        "value and valueFrom exclude each other",
    ),
    (
        "site env two sources",
        _site(
            env=[
                {
                    "name": "X",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "spec.nodeName"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ]
        ),
        "exactly one of secretKeyRef",
    ),
    ("site env no source", _site(env=[{"name": "X", "valueFrom": {}}]), "exactly one of secretKeyRef"),
    ("site envFrom no source", _site(envFrom=[{"prefix": "A_"}]), "exactly one of secretRef, configMapRef"),
    ("site hostPath with ..", _site(data={"hostPath": {"path": "/data/../etc"}}), "data directory"),
]
VALID = [
    ("fed defaults", _fed()),
    ("fed names and addresses", _fed(tls={"dnsNames": ["ps.example.org", "*.example.org", "lb-1.eu"],
                                          "ipAddresses": ["203.0.113.7", "2001:db8::1", "::ffff:10.0.0.1"]})),
    ("fed name 63 chars", _fed("f" * 63)),
    ("site defaults", _site()),
    ("site port 65535", _site(psAddress="ps.example.org:65535")),
    ("site port 1", _site(psAddress="10.0.0.1:1")),
    ("site IPv6 address", _site(psAddress="[2001:db8::1]:7443")),
    ("site name 63 chars", _site("s" * 63)),
    ("site env from a Secret", _site(env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf",
                                     "key": "token"}}}, {"name": "LOG_LEVEL", "value": "debug"}],
                                     envFrom=[{"secretRef": {"name": "wandb"}, "prefix": "WANDB_"}])),
]  # fmt: skip


@pytest.mark.parametrize(("what", "obj", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_crafted_invalid_objects_are_refused_at_admission(what: str, obj: dict[str, Any], message: str) -> None:
    refused = admit(f"{obj['kind'].lower()}s", obj)
    assert refused, f"{what}: admitted"
    assert any(message in r for r in refused), refused


@pytest.mark.parametrize(("what", "obj"), VALID, ids=[c[0] for c in VALID])
def test_valid_objects_are_admitted_and_parsed_by_the_operator(what: str, obj: dict[str, Any]) -> None:
    assert admit(f"{obj['kind'].lower()}s", obj) == []
    parse = parse_federation_spec if obj["kind"] == "Federation" else parse_siteclient_spec
    parse(obj["spec"])  # what the API server admits, the operator serves


def test_an_address_the_pattern_admits_but_no_ip_is_refused_by_the_operator() -> None:
    """'::::' matches the IPv6 shape: the operator's model refuses it (Degraded InvalidSpec, not a bad certificate)."""
    obj = _fed(tls={"ipAddresses": ["::::"]})
    assert admit("federations", obj) == []
    with pytest.raises(ValidationError, match="ipAddresses|ip_addresses"):
        parse_federation_spec(obj["spec"])


def _nulls(node: Any, path: str = "$") -> list[str]:
    if isinstance(node, dict):
        found = [path] if "default" in node and node["default"] is None else []
        return found + [p for k, v in node.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _nulls(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("plural", ["federations", "siteclients"])
def test_no_default_is_null(plural: str) -> None:
    """`default: null` is no value of an object-typed field: JSON-Schema tooling (and editors) reject it."""
    assert _nulls(_schema(plural)) == []
    jsonschema.Draft4Validator.check_schema(_schema(plural))
