"""Builders of issue 13's children: one PS per group, the peer secret, the split trainer, a client's group."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from geofed.config import FederationConfig
from geofed_operator import names
from geofed_operator.attempts import Outcome, classify_attempt
from geofed_operator.cloud_builders import (
    FederationObject,
    ServedTLS,
    build_config_map,
    build_metrics_service,
    build_pdb,
    build_peer_secret,
    build_ps_deployment,
    build_pvc,
    build_service,
    ps_args,
    tls_names,
)
from geofed_operator.enrollment import build_site_manifests
from geofed_operator.federation_status import excluded_groups, federation_status_from_groups, group_entry
from geofed_operator.trainer_builders import (
    build_trainer_deployment,
    build_trainer_pvc,
    build_trainer_service,
    trainer_args,
)

from .test_builders import container, site, valid

GROUPS = [{"name": "us-east"}, {"name": "eu-west", "address": "10.0.3.7:7443"}]
FSL = {"name": "fsl-sage", "cutLayer": 1}


def fed(**spec: Any) -> FederationObject:
    body = {"metadata": {"name": "demo", "namespace": "ml"}, "spec": spec}
    return FederationObject.from_body(body, default_image="ps:1", trainer_image="client:1")


def flags(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


def _mount(manifest: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((m for m in container(manifest)["volumeMounts"] if m["name"] == name), None)


def _volume(manifest: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in manifest["spec"]["template"]["spec"]["volumes"] if v["name"] == name), None)


def test_each_group_gets_its_own_ps_service_pvc_and_pdb_with_disjoint_selectors() -> None:
    f = fed(groups=GROUPS)
    assert f.groups == ("us-east", "eu-west")
    deployments = {g: valid(build_ps_deployment(f, config_hash="h", group=g)) for g in f.groups}
    services = {g: valid(build_service(f, g)) for g in f.groups}
    for g in f.groups:
        name = f"demo-ps-{g}"
        assert deployments[g]["metadata"]["name"] == services[g]["metadata"]["name"] == name
        assert valid(build_pdb(f, g))["metadata"]["name"] == name
        assert valid(build_metrics_service(f, g))["metadata"]["name"] == f"demo-ps-{g}-metrics"
        assert valid(build_pvc(f, g))["metadata"]["name"] == f"demo-checkpoints-{g}"
        claim = _volume(deployments[g], "checkpoints")["persistentVolumeClaim"]["claimName"]
        assert claim == f"demo-checkpoints-{g}"
        selector = services[g]["spec"]["selector"]
        assert selector[names.LABEL_PS_GROUP] == g
        assert deployments[g]["spec"]["selector"]["matchLabels"] == selector
        labels = deployments[g]["spec"]["template"]["metadata"]["labels"]
        assert all(labels[k] == v for k, v in selector.items())
    # A Service never picks the other group's pod.
    east_pod = deployments["us-east"]["spec"]["template"]["metadata"]["labels"]
    assert not all(east_pod.get(k) == v for k, v in services["eu-west"]["spec"]["selector"].items())


def test_a_group_ps_runs_with_its_group_and_the_peer_secret_read_only() -> None:
    f = fed(groups=GROUPS)
    dep = build_ps_deployment(f, config_hash="h", group="eu-west")
    cmd = container(dep)["command"]
    assert flags(cmd, "--group") == "eu-west"
    assert flags(cmd, "--peer-token-file") == "/etc/geofed/peer/token"
    assert flags(cmd, "--peer-ca") == "/etc/geofed/tls/ca.crt"
    assert _mount(dep, "peer") == {"name": "peer", "mountPath": "/etc/geofed/peer", "readOnly": True}
    assert _volume(dep, "peer")["secret"]["secretName"] == "demo-peer"
    # A served certificate without ca.crt: no --peer-ca to point at; plaintext: none either.
    assert "--peer-ca" not in ps_args(f, "eu-west", ServedTLS(has_ca=False))
    assert "--peer-ca" not in ps_args(fed(groups=GROUPS, insecure=True), "eu-west")


def test_without_groups_the_single_ps_is_unchanged() -> None:
    f = fed()
    assert f.groups == (None,)
    dep = build_ps_deployment(f, config_hash="h")
    assert dep["metadata"]["name"] == "demo-ps" and build_pvc(f)["metadata"]["name"] == "demo-checkpoints"
    assert names.LABEL_PS_GROUP not in dep["spec"]["selector"]["matchLabels"]
    cmd = container(dep)["command"]
    assert "--group" not in cmd and "--peer-token-file" not in cmd and _volume(dep, "peer") is None
    assert f.ps_address == "demo-ps.ml.svc:7443"


def test_unset_group_addresses_become_the_group_services_dns_names() -> None:
    f = fed(groups=GROUPS, service={"port": 8443})
    config = FederationConfig.model_validate(yaml.safe_load(build_config_map(f)["data"]["federation.yaml"]))
    assert [(g.name, g.address) for g in config.groups] == [
        ("us-east", "demo-ps-us-east.ml.svc:8443"),  # unset: the in-cluster Service, on the spec's port
        ("eu-west", "10.0.3.7:7443"),  # set: kept as written
    ]
    assert f.ps_address == "demo-ps-us-east.ml.svc:8443"


def test_the_certificate_covers_every_group_service_and_the_trainer() -> None:
    covered = tls_names(fed(groups=GROUPS, paradigm=FSL))
    for svc in ("demo-ps-us-east", "demo-ps-eu-west", "demo-trainer"):
        assert f"{svc}.ml.svc" in covered and svc in covered
    assert "demo-ps.ml.svc" not in covered


def test_peer_secret_holds_the_token() -> None:
    secret = valid(build_peer_secret(fed(groups=GROUPS), "s3cret"))
    assert secret["metadata"]["name"] == "demo-peer"
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"


def test_fsl_sage_gets_a_trainer_and_the_paradigm_points_clients_at_it() -> None:
    f = fed(paradigm=FSL, splitTrainer={"resources": {"limits": {"nvidia.com/gpu": 1}}})
    assert f.split_learning and not fed().split_learning
    dep, svc, pvc = (
        valid(build_trainer_deployment(f, config_hash="h")),
        valid(build_trainer_service(f)),
        valid(build_trainer_pvc(f)),
    )
    assert dep["metadata"]["name"] == svc["metadata"]["name"] == "demo-trainer"
    assert pvc["metadata"]["name"] == "demo-trainer-state"
    c = container(dep)
    assert c["image"] == "client:1" and c["resources"]["limits"]["nvidia.com/gpu"] == 1
    cmd = c["command"]
    assert cmd[:3] == ["python", "-m", "client_agent.split.trainer"]
    assert flags(cmd, "--ps") == "demo-ps.ml.svc:7443"
    assert flags(cmd, "--peer-token-file") == "/etc/geofed/peer/token"
    assert flags(cmd, "--tls-cert") == "/etc/geofed/tls/tls.crt" and flags(cmd, "--ca") == "/etc/geofed/tls/ca.crt"
    assert flags(cmd, "--port") == "7450" and flags(cmd, "--out") == "/var/lib/geofed/trainer"
    assert _mount(dep, "peer")["readOnly"] is True
    assert _volume(dep, "state")["persistentVolumeClaim"]["claimName"] == "demo-trainer-state"
    # The trainer's Service picks the trainer pod, never a PS pod.
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"][names.LABEL_NAME] == names.TRAINER_APP
    assert f.config.paradigm.trainer == "demo-trainer.ml.svc:7450"


def test_the_trainer_checks_sessions_at_the_first_group_and_a_set_address_is_kept() -> None:
    f = fed(groups=GROUPS, paradigm={**FSL, "trainer": "trainer.example.org:443"}, insecure=True)
    cmd = trainer_args(f)
    assert flags(cmd, "--ps") == "demo-ps-us-east.ml.svc:7443" and cmd[-1] == "--insecure"
    assert f.config.paradigm.trainer == "trainer.example.org:443"
    assert fed(splitTrainer={"image": "lab/trainer:2"}, paradigm=FSL).trainer_image == "lab/trainer:2"


def _ps(version: int, members: list[str], **extra: Any) -> dict[str, Any]:
    return {"version": version, "has_model": True, "connected_clients": 2, "known_clients": 3,
            "ring_allreduces": version, "ring_members": members, **extra}  # fmt: skip


@pytest.mark.parametrize(
    ("views", "excluded"),
    [
        ({"a": ["a", "b"], "b": ["a", "b"]}, []),
        ({"a": ["a"], "b": ["b"]}, ["a", "b"]),  # each rings alone: both are out of the other's ring
        ({"a": ["a", "c"], "b": ["b"], "c": ["a", "c"]}, ["b"]),
        ({"a": [], "b": []}, []),  # no ring yet: nobody is taken as excluded
    ],
)
def test_excluded_groups(views: dict[str, list[str]], excluded: list[str]) -> None:
    entries = [group_entry(g, f"{g}:1", _ps(1, m)) for g, m in views.items()]
    assert "public_address" not in entries[0]
    assert excluded_groups(entries) == excluded


def test_group_status_sums_clients_and_takes_the_lowest_version() -> None:
    import datetime as dt

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    both = ["eu-west", "us-east"]
    observed = [("us-east", "e:1", _ps(9, both), "lb-east:7443"), ("eu-west", "w:1", _ps(8, both), None)]
    status = federation_status_from_groups(observed, now=now, generation=1, conditions=None)
    assert (status["phase"], status["version"], status["connectedClients"]) == ("Running", 8, 4)
    assert status["groupVersions"] == "us-east=9,eu-west=8"
    assert status["groups"][0] == {"name": "us-east", "psAddress": "e:1", "publicAddress": "lb-east:7443",
                                   "version": 9, "hasModel": True,
                                   "connectedClients": 2, "ringAllreduces": 9,
                                   "ringMembers": ["eu-west", "us-east"]}  # fmt: skip
    assert "publicAddress" not in status["groups"][1]
    observed[1] = ("eu-west", "w:1", _ps(8, ["eu-west"]), None)
    status = federation_status_from_groups(observed, now=now, generation=1, conditions=None)
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert status["phase"] == "Degraded" and degraded["reason"] == "RingMemberExcluded"
    assert "us-east" in degraded["message"]


def test_a_siteclient_group_becomes_the_clients_group_flag() -> None:
    cmd = container(valid(_job(site(group="eu-west", psAddress="ps-eu.example.org:7443"))))["command"]
    assert flags(cmd, "--group") == "eu-west" and flags(cmd, "--ps") == "ps-eu.example.org:7443"
    assert "--group" not in container(_job(site()))["command"]
    with pytest.raises(ValueError, match="group"):
        site(group="Not_A_Label")


def _job(sc: Any) -> dict[str, Any]:
    from geofed_operator.site_builders import build_client_job

    return build_client_job(sc, 1, names.token_secret_name(sc.name, 1))


def test_enrollment_writes_the_group_into_the_siteclient() -> None:
    docs = build_site_manifests(site="uw", federation="demo", ps_address="ps-eu.example.org:7443",
                                credential="c", insecure=True, group="eu-west")  # fmt: skip
    assert docs[1]["spec"]["group"] == "eu-west" and docs[1]["spec"]["psAddress"] == "ps-eu.example.org:7443"


def test_a_join_refused_by_the_ps_is_classified_as_such() -> None:
    said = "geofed client: the parameter server refused this client: unknown PS group 'mars'; this federation's "
    pod = {
        "metadata": {"name": "gpu0-1-abcde"},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "client", "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": said}}}]},
    }  # fmt: skip
    job = {
        "metadata": {"name": "gpu0-1"},
        "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]},
    }
    state = classify_attempt(job, [pod], [])
    assert (state.outcome, state.reason) == (Outcome.FAILED, "JoinRefused")
    assert "unknown PS group 'mars'" in state.message


def test_the_ps_cli_reads_a_group_ps_command_line_as_its_settings() -> None:
    """The PS's own parser (not a copy of its flags) turns the operator's command line into ServerConfig."""
    import argparse

    from geofed.cli_flags import model_from_flags
    from geofed.config import ServerConfig
    from ps_server.cli import add_commands

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    cmd = ps_args(fed(groups=GROUPS), "eu-west")
    assert cmd[:2] == ["geofed", "ps"]
    cfg = model_from_flags(ServerConfig, parser.parse_args(cmd[1:]))
    assert (cfg.group, cfg.peer_token_file, cfg.peer_ca) == (
        "eu-west",
        "/etc/geofed/peer/token",
        "/etc/geofed/tls/ca.crt",
    )
