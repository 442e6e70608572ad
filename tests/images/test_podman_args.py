"""geofed_testing.podman's translation of a pod spec into `podman run` flags (no podman needed)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from geofed_operator.cloud_builders import CHECKPOINT_DIR, CONFIG_DIR, FederationObject, build_ps_deployment
from geofed_testing.podman import PodSpecError, expand, own_for_fs_group, project, run_args


def ps_pod() -> dict[str, Any]:
    body = {"metadata": {"name": "demo", "namespace": "ml"}, "spec": {"model": {"family": "gpt2"}}}
    fed = FederationObject.from_body(body, default_image="localhost/geofed/ps:dev")
    return build_ps_deployment(fed, config_hash="h")["spec"]["template"]["spec"]


def volumes_for(pod: dict[str, Any], root: Path, skip: str = "") -> dict[str, Path]:
    out = {}
    for v in pod["volumes"]:
        if "emptyDir" not in v and v["name"] != skip:
            (root / v["name"]).mkdir()
            out[v["name"]] = root / v["name"]
    return out


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_operator_ps_pod_runs_read_only_non_root_without_capabilities(tmp_path: Path):
    """The PS pod's securityContext and mounts become the podman flags that enforce them."""
    # Prepare
    pod = ps_pod()
    container = pod["containers"][0]

    # Execute
    argv = run_args(pod, container, name="demo-ps", volumes=volumes_for(pod, tmp_path), pod_dir=tmp_path / "pod")

    # Assert
    image_at = argv.index("localhost/geofed/ps:dev")
    flags, command = argv[:image_at], argv[image_at + 1 :]
    assert flag_values(flags, "--user") == ["10001:10001"]
    assert flag_values(flags, "--group-add") == ["10001"]  # fsGroup
    assert "--read-only" in flags and "--read-only-tmpfs=false" in flags  # no writable /tmp unless mounted
    assert "--cap-drop=all" in flags
    assert "no-new-privileges" in flag_values(flags, "--security-opt")
    mounts = {v.split(":")[1]: v.split(":")[2] for v in flag_values(flags, "--volume")}
    assert mounts[CONFIG_DIR] == "ro" and mounts["/etc/geofed/admin"] == "ro"
    assert mounts[CHECKPOINT_DIR] == "rw" and mounts["/tmp"] == "rw"
    tmp_dir = tmp_path / "pod" / "empty-dirs" / "tmp"
    assert stat.S_IMODE(tmp_dir.stat().st_mode) == 0o777
    assert json.loads(flag_values(flags, "--entrypoint")[0]) == container["command"]
    assert command == []  # `command` without `args`: the image's CMD is dropped
    assert "PYTHONUNBUFFERED=1" in flag_values(flags, "--env")


def test_a_volume_without_a_host_directory_is_refused(tmp_path: Path):
    pod = ps_pod()
    with pytest.raises(PodSpecError, match="'checkpoints'.*no host directory"):
        run_args(pod, pod["containers"][0], name="x", volumes=volumes_for(pod, tmp_path, skip="checkpoints"),
                 pod_dir=tmp_path)  # fmt: skip


def test_secret_volumes_are_read_only_even_when_the_mount_is_not(tmp_path: Path):
    pod = {"volumes": [{"name": "s", "secret": {"secretName": "x"}}]}
    container = {"image": "i", "volumeMounts": [{"name": "s", "mountPath": "/s"}]}
    argv = run_args(pod, container, name="x", volumes={"s": tmp_path})
    assert flag_values(argv, "--volume") == [f"{tmp_path}:/s:ro"]


def test_env_value_from_secret_and_config_map_and_expansion():
    """valueFrom is resolved through the lookup; `$(VAR)` expands in later values and in args."""
    # Prepare
    data = {("Secret", "cred"): {"token": "s3cret"}, ("ConfigMap", "cfg"): {"site": "uw"}}
    container = {
        "image": "i",
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "cred", "key": "token"}}},
            {"name": "SITE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "site"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
            {"name": "WHO", "value": "$(SITE)-client $$(SITE)"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "command": ["run"],
        "args": ["--site", "$(SITE)", "$(UNDEFINED)"],
    }

    # Execute
    argv = run_args({}, container, name="x", lookup=lambda k, n: data.get((k, n)), fields={"metadata.name": "p-0"})

    # Assert
    assert flag_values(argv, "--env") == ["TOKEN=s3cret", "SITE=uw", "WHO=uw-client $(SITE)", "POD=p-0"]
    assert argv[-3:] == ["--site", "uw", "$(UNDEFINED)"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"secretKeyRef": {"name": "cred", "key": "nope"}}, "key 'nope' of Secret 'cred' not found"),
        ({"configMapKeyRef": {"name": "nope", "key": "k"}}, "ConfigMap 'nope' not found"),
        ({"fieldRef": {"fieldPath": "status.podIP"}}, "fieldRef 'status.podIP' is not known"),
    ],
)
def test_unresolvable_env_is_refused(env: dict[str, Any], message: str):
    container = {"image": "i", "env": [{"name": "V", "valueFrom": env}]}
    with pytest.raises(PodSpecError, match=message):
        run_args({}, container, name="x", lookup=lambda k, n: {"token": "t"} if (k, n) == ("Secret", "cred") else None)


@pytest.mark.parametrize(
    ("security", "message"),
    [
        ({"runAsNonRoot": True, "runAsUser": 0}, "non-root"),
        ({"seLinuxOptions": {"level": "s0"}}, "not implemented"),
        ({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}, "not implemented"),
    ],
)
def test_security_contexts_not_honoured_are_refused(security: dict[str, Any], message: str):
    with pytest.raises(PodSpecError, match=message):
        run_args({}, {"image": "i", "securityContext": security}, name="x")


def test_run_as_non_root_checks_the_image_user_when_no_uid_is_given(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("geofed_testing.podman.image_user", lambda image, podman: "geofed")
    with pytest.raises(PodSpecError, match="non-numeric user"):
        run_args({"securityContext": {"runAsNonRoot": True}}, {"image": "i"}, name="x")


def test_expand_leaves_undefined_variables_and_unescapes_dollars():
    assert expand("$(A)/$(B)/$$(A)/$$", {"A": "1"}) == "1/$(B)/$(A)/$"


def test_fs_group_makes_volume_files_group_readable(tmp_path: Path):
    (tmp_path / "key").write_text("k")
    (tmp_path / "key").chmod(0o400)
    own_for_fs_group(tmp_path, 4242, read_only=True)
    assert (tmp_path / "key").stat().st_gid == 4242
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o440
    assert stat.S_IMODE(tmp_path.stat().st_mode) & 0o2000  # setgid: new files inherit the group
    own_for_fs_group(tmp_path, 4242)
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o460


def test_project_writes_items_with_their_modes_and_refuses_a_missing_key(tmp_path: Path):
    volume = {
        "name": "tls",
        "secret": {"secretName": "t", "defaultMode": 0o440, "items": [{"key": "a", "path": "x/a"}]},
    }
    project(volume, {"a": b"A", "b": b"B"}, tmp_path / "v")
    assert (tmp_path / "v" / "x" / "a").read_bytes() == b"A" and not (tmp_path / "v" / "b").exists()
    assert stat.S_IMODE((tmp_path / "v" / "x" / "a").stat().st_mode) == 0o440
    with pytest.raises(PodSpecError, match="key 'a' not in Secret 't'"):
        project(volume, {"b": b"B"}, tmp_path / "w")
    with pytest.raises(PodSpecError, match="Secret 't' not found"):
        project(volume, None, tmp_path / "w")


def test_container_fields_not_honoured_are_refused():
    """A preStop hook would change what a grace period does: refused rather than silently skipped."""
    container = {"image": "i", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}}
    with pytest.raises(PodSpecError, match="lifecycle"):
        run_args({}, container, name="x")
