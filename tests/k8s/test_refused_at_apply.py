"""Specs the operator would refuse at reconcile time are refused at `kubectl apply`, with the API's message.

The real kubectl applies crafted Federations and SiteClients to the emulator, which runs the CRDs'
schema and CEL rules as an API server does (defaults filled in first); the same specs are refused by
the operator's models too (Degraded InvalidSpec where no API server checked them). A real API server
also enforces a CEL cost budget, which the emulator does not: the rules here stay within it by the
bounds on extraArgs (256 items of at most 1024 characters).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from client_agent.cli import _add_client_flags
from geofed_operator.cloud_builders import FederationObject
from geofed_operator.site_builders import SiteClientObject, client_command
from geofed_operator.siteclient_spec import (
    OPERATOR_OWNED_CLIENT_FLAGS,
    client_flags,
    flag_spellings,
)

from .conftest import NEEDS_KUBECTL, run_kubectl
from .emulator import GeofedEmulator
from .objects import get

SITE_SPEC = {"federation": "demo", "site": "uw", "psAddress": "ps.example.org:7443",
             "credentialSecretRef": {"name": "uw-credential"}, "data": {"pvc": {"claimName": "uw-data"}}}  # fmt: skip


def _site(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "geofed.io/v1alpha1", "kind": "SiteClient",
            "metadata": {"name": name, "namespace": "default"}, "spec": {**SITE_SPEC, **spec}}  # fmt: skip


def _fed(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "geofed.io/v1alpha1", "kind": "Federation",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip


GROUPS = [{"name": "us-east"}, {"name": "eu-west"}]
# (object, where the API server reports it, its message)
REFUSED = [
    (_site("ps-flag", extraArgs=["--max-rounds", "2", "--ps", "evil:7443"]), "spec.extraArgs[2]",
     "extraArgs must not set --ps: the operator sets it (from psAddress)"),
    (_site("ps-flag-equals", extraArgs=["--ps=evil:7443"]), "spec.extraArgs[0]",
     "extraArgs must not set --ps: the operator sets it (from psAddress)"),
    (_site("token-abbreviated", extraArgs=["--token-f", "/tmp/t"]), "spec.extraArgs[0]",
     "extraArgs must not set --token-file: the operator sets it (from the attempt's one-time token Secret)"),
    (_site("client-id-abbreviated", extraArgs=["--cli=x.y"]), "spec.extraArgs[0]",
     "extraArgs must not set --client-id"),
    (_site("work-dir", extraArgs=["--work-dir", "/elsewhere"]), "spec.extraArgs[0]",
     "extraArgs must not set --work-dir: the operator sets it (from workPvc)"),
    (_site("no-insecure", insecure=True, extraArgs=["--no-insecure"]), "spec.extraArgs[0]",
     "extraArgs must not set --no-insecure: the operator sets it (from insecure)"),
    (_site("ca", extraArgs=["--ca=/etc/ca.pem"]), "spec.extraArgs[0]",
     "extraArgs must not set --ca: the operator sets it (from caSecretRef)"),
    (_site("data", extraArgs=["--data", "/other"]), "spec.extraArgs[0]",
     "extraArgs must not set --data: the operator sets it (from data)"),
    (_fed("tls-and-insecure", tlsSecretName="ps-tls", insecure=True), "spec",
     "tlsSecretName and insecure exclude each other"),
    (_fed("node-port-groups", groups=GROUPS, service={"type": "NodePort", "nodePort": 30443}), "spec",
     "service.nodePort cannot be shared by several PS groups' Services; leave it unset"),
    (_fed("auto-with-groups", groups=GROUPS, aggregation={"mode": "auto"}), "spec",
     "aggregation.mode 'auto' needs one PS: it cannot be combined with groups or psShards > 1"),
    (_fed("auto-sharded", psShards=2, paradigm={"name": "pretrain"}, aggregation={"mode": "auto"}), "spec",
     "aggregation.mode 'auto' needs one PS"),
    (_fed("block-scales", codec={"blockScales": 32}), "spec", "codec.blockScales must be 0 or at least 64"),
    (_fed("interval-range", autotune={"intervalMinSeconds": 700}), "spec",
     "autotune.intervalMinSeconds must not exceed intervalMaxSeconds"),
    (_fed("straggler-range", autotune={"stragglerMinSeconds": 30, "stragglerMaxSeconds": 10}), "spec",
     "autotune.stragglerMinSeconds must not exceed stragglerMaxSeconds"),
    (_fed("hysteresis", autotune={"syncBelow": 2.0, "asyncAbove": 2.0}), "spec",
     "autotune.syncBelow must be below asyncAbove"),
    (_fed("metrics-port-is-port", service={"port": 7443, "metricsPort": 7443}), "spec.service",
     "service.metricsPort must differ from service.port: the PS listens on both"),
    (_site("work-pvc-not-dns", workPvc="Work_PVC"), "spec.workPvc", "should match"),
    (_site("claim-not-dns", data={"pvc": {"claimName": "uw data"}}), "spec.data.pvc.claimName", "should match"),
]  # fmt: skip
ADMITTED = [
    _site("own-flags", extraArgs=["--max-rounds", "2", "--device=cpu", "--cert", "/c.pem", "--log-level", "DEBUG"]),
    _fed("one-group-node-port", groups=[{"name": "us-east"}], service={"type": "NodePort", "nodePort": 30443}),
    _fed("block-scales-64", codec={"blockScales": 64}, aggregation={"mode": "auto"}),
]


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
@NEEDS_KUBECTL
async def test_kubectl_apply_refuses_what_the_operator_would(api: GeofedEmulator, tmp_path: Path) -> None:
    # Prepare
    manifest = tmp_path / "crafted.yaml"
    manifest.write_text(yaml.safe_dump_all([obj for obj, _, _ in REFUSED] + ADMITTED))
    # Execute
    code, out, err = await run_kubectl("apply", "-f", str(manifest))
    # Assert
    assert code == 1
    for obj, where, message in REFUSED:
        name = obj["metadata"]["name"]
        assert f'{obj["kind"]}.geofed.io "{name}" is invalid: {where}: Invalid value: ' in err, (name, err)
        line = next(x for x in err.splitlines() if f'"{name}" is invalid' in x)
        assert message in line, (name, line)
        assert get(api, f"geofed.io/v1alpha1/{obj['kind'].lower()}s", "default", name) is None
    for obj in ADMITTED:
        assert f"{obj['kind'].lower()}.geofed.io/{obj['metadata']['name']} created" in out, err


# What the operator's models say of the same specs (geofed.config names its settings in snake_case).
OPERATOR_SAYS = {
    "auto-with-groups": "aggregation.mode 'auto' needs one PS",
    "auto-sharded": "aggregation.mode 'auto' needs one PS",
    "block-scales": "block_scales must be 0 or at least 64, got 32",
    "interval-range": "autotune.interval_min_s (700) must not exceed interval_max_s (600)",
    "straggler-range": "autotune.straggler_min_s (30) must not exceed straggler_max_s (10)",
    "hysteresis": "autotune.sync_below (2) must be below async_above (2)",
    "work-pvc-not-dns": "String should match pattern",
    "claim-not-dns": "String should match pattern",
}


@pytest.mark.parametrize(("obj", "message"), [(o, OPERATOR_SAYS.get(o["metadata"]["name"], m)) for o, _, m in REFUSED],
                         ids=[o["metadata"]["name"] for o, _, _ in REFUSED])  # fmt: skip
def test_the_operator_refuses_them_too(obj: dict[str, Any], message: str) -> None:
    """What the handlers parse a body with: a ValidationError there is Degraded InvalidSpec."""
    parse = FederationObject.from_body if obj["kind"] == "Federation" else SiteClientObject.from_body
    with pytest.raises(ValidationError, match=re.escape(message)):
        parse(obj, "img")


@pytest.mark.parametrize("obj", ADMITTED, ids=[o["metadata"]["name"] for o in ADMITTED])
def test_the_operator_takes_what_is_admitted(obj: dict[str, Any]) -> None:
    parse = FederationObject.from_body if obj["kind"] == "Federation" else SiteClientObject.from_body
    assert parse(obj, "img").name == obj["metadata"]["name"]


def _client_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    _add_client_flags(parser)
    return parser


def test_client_flags_are_the_clients_own() -> None:
    """The flag list the rules are built from is the one `geofed client` parses."""
    parsed = {s for a in _client_parser()._actions for s in a.option_strings if s.startswith("--")}
    assert set(client_flags()) == parsed


@pytest.mark.parametrize("flag", sorted(OPERATOR_OWNED_CLIENT_FLAGS))
def test_each_refused_spelling_is_read_by_the_client_as_the_owned_flag(flag: str) -> None:
    parser = _client_parser()
    owned = next(a for a in parser._actions if flag in a.option_strings)
    for spelling in flag_spellings(flag, client_flags()):
        given = [spelling] if owned.nargs == 0 else [spelling, "x"]
        assert getattr(parser.parse_args(given), owned.dest) is not None, spelling


@pytest.mark.parametrize(
    "spec",
    [
        {"insecure": True, "group": "us-east"},
        {"caSecretRef": {"name": "ca"}, "procsPerPod": 2, "gpusPerPod": 2},
    ],
    ids=["insecure-group", "ca-torchrun"],
)
def test_every_flag_the_builder_sets_is_owned(spec: dict[str, Any]) -> None:
    body = {"metadata": {"name": "c", "namespace": "default"}, "spec": {**SITE_SPEC, **spec}}
    command = client_command(SiteClientObject.from_body(body, "img"))
    flags = {a for a in command[command.index("--ps") :] if a.startswith("--")}
    assert flags <= set(OPERATOR_OWNED_CLIENT_FLAGS)
    assert {"--ps", "--client-id", "--token-file", "--data", "--work-dir"} < flags
