"""Builders and status of a sharded PS (issue 18 part 3): the front plus one Deployment, Service and PVC per shard."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

import pytest
from pydantic import ValidationError

from geofed.cli_flags import model_from_flags
from geofed.config import ServerConfig
from geofed_operator import names
from geofed_operator.cloud_builders import (
    FederationObject,
    ServedTLS,
    build_ps_deployment,
    build_service,
    ps_args,
    tls_names,
)
from geofed_operator.handlers.deps import readable
from geofed_operator.shard_builders import (
    build_shard_deployment,
    build_shard_pdb,
    build_shard_pvc,
    build_shard_service,
    shard_args,
)
from geofed_operator.shard_status import federation_status_from_shards
from ps_server.cli import add_commands

from .test_builders import container, valid

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def fed(**spec: Any) -> FederationObject:
    body = {"metadata": {"name": "demo", "namespace": "ml"}, "spec": spec}
    return FederationObject.from_body(body, default_image="ps:1")


def flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def _volume(manifest: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((v for v in manifest["spec"]["template"]["spec"]["volumes"] if v["name"] == name), None)


def _mount(manifest: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((m for m in container(manifest)["volumeMounts"] if m["name"] == name), None)


def _server_config(cmd: list[str]) -> ServerConfig:
    """The PS's own parser (not a copy of its flags) reading a command line the operator built."""
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    assert cmd[:2] == ["geofed", "ps"]
    return model_from_flags(ServerConfig, parser.parse_args(cmd[1:]))


def test_one_shard_is_the_single_ps_as_before() -> None:
    """psShards 1 (or unset): no shard objects, no front flags, no peer secret, the certificate's old names."""
    for f in (fed(), fed(psShards=1)):
        assert f.shards == ()
        cmd = ps_args(f)
        assert not any(a.startswith("--shard") for a in cmd) and "--peer-token-file" not in cmd
        dep = build_ps_deployment(f, config_hash="h")
        assert _volume(dep, "peer") is None and _mount(dep, "peer") is None
        assert tls_names(f) == ["demo-ps.ml.svc", "demo-ps", "demo-ps.ml", "demo-ps.ml.svc.cluster.local",
                                "localhost", "127.0.0.1"]  # fmt: skip
    assert build_ps_deployment(fed(psShards=1), config_hash="h") == build_ps_deployment(fed(), config_hash="h")


def test_three_shards_get_a_deployment_service_pvc_and_pdb_each() -> None:
    f = fed(psShards=3, service={"type": "LoadBalancer"})
    assert f.shards == (0, 1, 2)
    for i in f.shards:
        name = f"demo-ps-shard-{i}"
        dep, svc = valid(build_shard_deployment(f, i, config_hash="h")), valid(build_shard_service(f, i))
        pvc, pdb = valid(build_shard_pvc(f, i)), valid(build_shard_pdb(f, i))
        assert dep["metadata"]["name"] == svc["metadata"]["name"] == pdb["metadata"]["name"] == name
        assert pvc["metadata"]["name"] == f"demo-checkpoints-shard-{i}"
        assert (dep["spec"]["replicas"], dep["spec"]["strategy"]) == (1, {"type": "Recreate"})
        assert _volume(dep, "checkpoints")["persistentVolumeClaim"]["claimName"] == f"demo-checkpoints-shard-{i}"
        # Internal only, whatever the front's Service type; port 7443 as the shards contract says.
        assert svc["spec"]["type"] == "ClusterIP" and [p["port"] for p in svc["spec"]["ports"]] == [7443]
        assert container(dep)["ports"] == [{"name": "grpc", "containerPort": 7443, "protocol": "TCP"}]
        selector = svc["spec"]["selector"]
        assert selector == dep["spec"]["selector"]["matchLabels"] == pdb["spec"]["selector"]["matchLabels"]
        assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        assert selector[names.LABEL_PS_SHARD] == str(i)
        assert dep["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH] == "h"
        assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    # The front's public Service picks the front pod only, never a shard's; no shard picks another's pod.
    front_selector = build_service(f)["spec"]["selector"]
    for i in f.shards:
        pod = build_shard_deployment(f, i, config_hash="h")["spec"]["template"]["metadata"]["labels"]
        assert not front_selector.items() <= pod.items()
        others = [build_shard_service(f, j)["spec"]["selector"] for j in f.shards if j != i]
        assert not any(s.items() <= pod.items() for s in others)
    front_pod = build_ps_deployment(f, config_hash="h")["spec"]["template"]["metadata"]["labels"]
    assert front_selector.items() <= front_pod.items()


def test_the_front_dials_every_shard_by_its_service_with_the_peer_secret_mounted() -> None:
    f = fed(psShards=3)
    dep = valid(build_ps_deployment(f, config_hash="h"))
    cmd = container(dep)["command"]
    cfg = _server_config(cmd)
    assert cfg.shard_role == "front"
    assert cfg.shard_addresses == "demo-ps-shard-0.ml.svc:7443,demo-ps-shard-1.ml.svc:7443,demo-ps-shard-2.ml.svc:7443"
    assert (cfg.peer_token_file, cfg.peer_ca) == ("/etc/geofed/peer/token", "/etc/geofed/tls/ca.crt")
    assert cfg.admin_token_file == "/etc/geofed/admin/credential"  # the front keeps the admin surface
    # The peer token is a mounted file from the Secret, never a literal on a command line or in env.
    assert _mount(dep, "peer") == {"name": "peer", "mountPath": "/etc/geofed/peer", "readOnly": True}
    assert _volume(dep, "peer")["secret"] == {"secretName": "demo-peer", "defaultMode": 0o440}
    assert "--peer-ca" not in ps_args(f, tls=ServedTLS(has_ca=False))
    assert "--peer-ca" not in ps_args(fed(psShards=3, insecure=True))


@pytest.mark.parametrize("insecure", [False, True])
def test_a_shard_runs_its_index_with_the_peer_secret_and_no_admin_token(insecure: bool) -> None:
    f = fed(psShards=3, insecure=insecure)
    dep = build_shard_deployment(f, 2, config_hash="h")
    c = container(dep)
    cfg = _server_config(c["command"])
    assert (cfg.shard_role, cfg.shard_index, cfg.port, cfg.host) == ("shard", 2, 7443, "0.0.0.0")
    assert (cfg.peer_token_file, cfg.checkpoint_dir) == ("/etc/geofed/peer/token", "/var/lib/geofed/checkpoints")
    assert (cfg.metrics_port, cfg.status_port, cfg.admin_token_file) == (0, 0, None)
    assert cfg.insecure is insecure
    assert (cfg.tls_cert, cfg.tls_key) == ((None, None) if insecure else
                                           ("/etc/geofed/tls/tls.crt", "/etc/geofed/tls/tls.key"))  # fmt: skip
    mounts = {m["name"] for m in c["volumeMounts"]}
    assert mounts == ({"config", "peer", "checkpoints", "tmp"} | (set() if insecure else {"tls"}))
    assert _volume(dep, "peer")["secret"]["secretName"] == "demo-peer"
    if not insecure:  # the generated TLS Secret, without the CA key
        assert [i["key"] for i in _volume(dep, "tls")["secret"]["items"]] == ["tls.crt", "tls.key", "ca.crt"]
    assert all("token" not in (e.get("value") or "") for e in c["env"])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["tcpSocket"] == {"port": "grpc"}
    assert shard_args(f, 2) == c["command"]


def test_the_certificate_covers_every_shard_service() -> None:
    covered = tls_names(fed(psShards=2))
    for name in ("demo-ps", "demo-ps-shard-0", "demo-ps-shard-1"):
        assert {name, f"{name}.ml.svc", f"{name}.ml.svc.cluster.local"} <= set(covered)
    assert "demo-ps-shard-2" not in covered


def test_a_long_federation_name_still_gets_resolvable_shard_addresses() -> None:
    """child_name shortens long names; the front is told the real Service names, not the default guess."""
    long = "a-very-long-federation-name-for-the-research-consortium"
    f = FederationObject.from_body({"metadata": {"name": long, "namespace": "ml"}, "spec": {"psShards": 2}}, "ps:1")
    addresses = flag(ps_args(f), "--shard-addresses").split(",")
    services = [build_shard_service(f, i)["metadata"]["name"] for i in f.shards]
    assert [a.split(".")[0] for a in addresses] == services
    assert all(len(s) <= 52 for s in services) and services[0] != f"{long}-ps-shard-0"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"psShards": 2, "groups": [{"name": "us-east"}]}, "ps_shards > 1 cannot be combined with PS groups"),
        ({"psShards": 2, "paradigm": {"name": "lora"}}, "parameters element by element (pretrain, bitfit); 'lora'"),
        ({"psShards": 2, "codec": {"name": "sparse"}}, "codec 'sparse' pushes sparse deltas"),
        ({"psShards": 65}, "less than or equal to 64"),
        ({"psShards": 0}, "greater than or equal to 1"),
    ],
)
def test_an_unsupported_sharded_spec_is_refused_with_a_readable_reason(spec: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError) as exc:
        fed(**spec)
    assert said in readable(exc.value)


def _shard(index: int, up: bool, version: int, error: str = "") -> dict[str, Any]:
    return {"index": index, "address": f"demo-ps-shard-{index}.ml.svc:7443", "up": up, "version": version,
            "numel": 100, "instance": f"i{index}", "last_error": error}  # fmt: skip


class _Message:
    """Shaped like a protobuf ShardStatus (attributes, not a mapping): what AdminClient.status() hands over."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def _front(*shards: Any) -> dict[str, Any]:
    return {"version": 5, "has_model": True, "connected_clients": 2, "known_clients": 2, "shards": list(shards)}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_shard_status_is_copied_and_all_up_is_running() -> None:
    status = federation_status_from_shards(
        _front(_Message(**_shard(1, True, 5)), _shard(0, True, 5)), 2, now=NOW, generation=1, conditions=None
    )
    assert (status["phase"], status["version"]) == ("Running", 5)
    assert status["shards"] == [
        {"index": 0, "address": "demo-ps-shard-0.ml.svc:7443", "up": True, "version": 5, "instance": "i0",
         "lastError": ""},
        {"index": 1, "address": "demo-ps-shard-1.ml.svc:7443", "up": True, "version": 5, "instance": "i1",
         "lastError": ""},
    ]  # fmt: skip
    assert _condition(status, "Degraded")["status"] == "False" and status["shardsUp"] == "2/2"


def test_a_down_shard_degrades_the_federation_naming_it() -> None:
    ps = _front(_shard(0, True, 5), _shard(1, False, 4, "shard 1 unreachable: connection refused"), _shard(2, True, 5))
    status = federation_status_from_shards(ps, 3, now=NOW, generation=1, conditions=None)
    degraded = _condition(status, "Degraded")
    assert status["phase"] == "Degraded" and degraded["status"] == "True" and degraded["reason"] == "ShardDown"
    assert "PS shard(s) 1 down" in degraded["message"] and "connection refused" in degraded["message"]
    assert _condition(status, "Ready")["status"] == "False"
    assert [s["up"] for s in status["shards"]] == [True, False, True] and status["shardsUp"] == "2/3"
    # Back up: healthy again.
    ps["shards"][1] = _shard(1, True, 5)
    again = federation_status_from_shards(ps, 3, now=NOW, generation=1, conditions=status["conditions"])
    assert again["phase"] == "Running" and _condition(again, "Degraded")["status"] == "False"


def test_a_shard_not_called_yet_is_not_down_but_an_unreported_one_is_unknown() -> None:
    fresh = {**_front(_shard(0, False, 0), _shard(1, False, 0)), "has_model": False}
    status = federation_status_from_shards(fresh, 2, now=NOW, generation=1, conditions=None)
    assert status["phase"] == "Running" and _condition(status, "Ready")["reason"] == "WaitingForModel"
    status = federation_status_from_shards(_front(_shard(0, True, 5)), 3, now=NOW, generation=1, conditions=None)
    degraded = _condition(status, "Degraded")
    assert (status["phase"], degraded["reason"]) == ("Degraded", "ShardStatusMissing")
    assert "shard(s) 1, 2 of 3" in degraded["message"]
    status = federation_status_from_shards(_front(), 2, now=NOW, generation=1, conditions=None)  # no field at all
    assert _condition(status, "Degraded")["reason"] == "ShardStatusMissing"


def test_a_shard_deployment_not_ready_keeps_it_progressing_and_a_down_shard_still_shows() -> None:
    ps = _front(_shard(0, True, 5), _shard(1, True, 5))
    rolling = ["PS shard 1: waiting for the PS pod: 0/1 ready, 1/1 updated"]
    status = federation_status_from_shards(ps, 2, rolling, now=NOW, generation=1, conditions=None)
    ready = _condition(status, "Ready")
    assert status["phase"] == "Progressing" and ready["status"] == "False" and ready["reason"] == "RollingOut"
    assert ready["message"] == rolling[0] and _condition(status, "Degraded")["status"] == "False"
    assert len(status["shards"]) == 2  # the front's view is copied meanwhile
    # Its pod restarting and the front failing to reach it: ShardDown wins over the roll-out.
    ps["shards"][1] = _shard(1, False, 5, "connection refused")
    status = federation_status_from_shards(ps, 2, rolling, now=NOW, generation=1, conditions=None)
    assert status["phase"] == "Degraded" and _condition(status, "Degraded")["reason"] == "ShardDown"
