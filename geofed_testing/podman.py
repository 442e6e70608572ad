"""A Kubernetes pod's container run as a real container with podman, for tests.

`run_args` turns one container of a pod spec (as the operator builds it) into a `podman run --detach`
command line: `command`/`args` (replacing the image's ENTRYPOINT/CMD the way the kubelet does, with
`$(VAR)` expansion), `env` and `envFrom` (`valueFrom` `secretKeyRef`/`configMapKeyRef` through a lookup
callback, `fieldRef` from given pod fields), the pod's and the container's `securityContext`
(`runAsUser`, `runAsGroup`, `fsGroup`, `supplementalGroups`, `runAsNonRoot`, `readOnlyRootFilesystem`,
`capabilities`, `allowPrivilegeEscalation`, `privileged`, `seccompProfile`), `workingDir` and
`volumeMounts` (`readOnly`, `subPath`; Secret, ConfigMap and projected volumes always read-only).
`Container` starts such a command line and reads the container's logs and exit code, runs a command in
it (exec probes), and stops it with a grace period (`podman stop -t GRACE`: the image's stop signal,
SIGTERM by default, then SIGKILL after GRACE seconds, which is what the kubelet does on pod deletion).

Typical use (a test kubelet materialises the Secret/ConfigMap/PVC volumes as host directories first)::

    argv = run_args(pod_spec, pod_spec["containers"][0], name="fed-ps-0", volumes={"config": cfg_dir, ...},
                    lookup=lambda kind, name: secrets_or_config_maps.get((kind, name)))
    ps = Container.start(argv)
    ...
    rc = ps.stop(grace_s=pod_spec.get("terminationGracePeriodSeconds", 30))

What differs from a kubelet with a CRI runtime:
- The network is the host's (`--network host` by default): no pod IP, no per-pod port space, so two pods
  listening on one port collide, and `ports` are not published. Services and DNS are the caller's.
- Volumes are host directories the caller prepares (`project` writes a Secret's or ConfigMap's files);
  this module only creates emptyDirs (0777 directories under `pod_dir`; `medium: Memory` as a tmpfs
  without its size limit) and refuses a volume it has no directory for. `fsGroup` is applied by
  `own_for_fs_group`, which the caller runs on the directories it wrote (the kubelet does it on mount).
  Secret and ConfigMap files are plain files, not the kubelet's atomically swapped `..data` links, and
  are not refreshed while the container runs.
- `resources` are not enforced (cgroupfs with hybrid cgroup v1 here), and probes, restarts and eviction
  are the caller's (`Container.exec`, `Container.running`); `terminationMessagePath` is not written.
- Images must be in local storage (`--pull=never`: `imagePullPolicy` is not honoured). An absent
  `seccompProfile` gets the runtime's default profile (the kubelet's SeccompDefault; without it a real
  node runs the container Unconfined). `terminationMessagePolicy` is not acted on.
- The ulimits are this host's own (podman's defaults exceed its hard limits), and runc is used because
  crun fails on hybrid cgroups; `PODMAN` holds those global flags.
Anything in the spec this module does not implement raises `PodSpecError` instead of being ignored.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PODMAN",
    "Container",
    "Lookup",
    "PodSpecError",
    "expand",
    "missing_tools",
    "image_user",
    "own_for_fs_group",
    "project",
    "run_args",
]

PODMAN: tuple[str, ...] = ("podman", "--runtime", "runc", "--cgroup-manager=cgroupfs")
NPROC_CAP = 16384
# A Secret/ConfigMap's decoded data by (kind, name) ("Secret" or "ConfigMap"), or None when it does not exist.
Lookup = Callable[[str, str], Mapping[str, str] | None]

_ALWAYS_READ_ONLY = ("secret", "configMap", "projected", "downwardAPI")
_HOST_BACKED = ("persistentVolumeClaim", "hostPath", *_ALWAYS_READ_ONLY)
_KNOWN_SECURITY = {
    "runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "supplementalGroups", "seccompProfile",
    "readOnlyRootFilesystem", "capabilities", "allowPrivilegeEscalation", "privileged", "fsGroupChangePolicy",
}  # fmt: skip
# Container fields run_args reads, and those it leaves to the caller (probes, resources, ports: see above).
_CONTAINER_FIELDS = {
    "name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "workingDir", "volumeMounts",
    "securityContext", "ports", "resources", "startupProbe", "readinessProbe", "livenessProbe",
    "terminationMessagePolicy", "terminationMessagePath",
}  # fmt: skip
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class PodSpecError(ValueError):
    """The pod cannot be started as specified (what the kubelet reports as CreateContainerConfigError)."""


def missing_tools() -> str | None:
    """Why containers cannot run here (a sentence naming the missing program), or None when they can."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install -y podman buildah runc debootstrap)"
    return None


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: a defined VAR is replaced, an undefined one stays as written,
    `$$` is a literal `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def _ref_value(kind: str, ref: Mapping[str, Any], lookup: Lookup, var: str) -> str | None:
    data = lookup(kind, ref["name"])
    if data is None or ref["key"] not in data:
        if ref.get("optional"):
            return None
        what = f"{kind} {ref['name']!r}" if data is None else f"key {ref['key']!r} of {kind} {ref['name']!r}"
        raise PodSpecError(f"env {var}: {what} not found")
    return data[ref["key"]]


def _env(container: Mapping[str, Any], lookup: Lookup, fields: Mapping[str, str]) -> dict[str, str]:
    """The container's environment in the kubelet's order: `envFrom` first, then `env` (later wins)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        kind, ref = ("Secret", source["secretRef"]) if "secretRef" in source else ("ConfigMap", source["configMapRef"])
        data = lookup(kind, ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise PodSpecError(f"envFrom: {kind} {ref['name']!r} not found")
        env.update({prefix + k: v for k, v in data.items()})
    for item in container.get("env", []):
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            value = _ref_value("Secret", source["secretKeyRef"], lookup, name)
        elif "configMapKeyRef" in source:
            value = _ref_value("ConfigMap", source["configMapKeyRef"], lookup, name)
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in fields:
                raise PodSpecError(f"env {name}: fieldRef {path!r} is not known here (given: {sorted(fields)})")
            value = fields[path]
        else:
            raise PodSpecError(f"env {name}: unsupported valueFrom {sorted(source)}")
        if value is not None:
            env[name] = value
    return env


def _security(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], image_user: Callable[[], str | None]
) -> list[str]:
    """podman flags of the merged securityContext (the container's fields override the pod's)."""
    pod_sc = dict(pod_spec.get("securityContext") or {})
    sc = {**pod_sc, **(container.get("securityContext") or {})}
    unknown = set(sc) - _KNOWN_SECURITY
    if unknown:
        raise PodSpecError(f"securityContext fields not implemented here: {sorted(unknown)}")
    flags: list[str] = []
    user, group = sc.get("runAsUser"), sc.get("runAsGroup")
    if sc.get("runAsNonRoot"):
        effective = user if user is not None else image_user()
        if effective is None or not str(effective).split(":")[0].isdigit():
            raise PodSpecError(
                f"runAsNonRoot and image has non-numeric user ({effective!r}), cannot verify user is non-root"
            )
        if int(str(effective).split(":")[0]) == 0:
            raise PodSpecError("container's runAsUser breaks non-root policy (runAsNonRoot and uid 0)")
    if user is not None:
        flags += ["--user", f"{user}:{group}" if group is not None else str(user)]
    elif group is not None:
        raise PodSpecError("runAsGroup without runAsUser is not implemented here")
    for gid in [*pod_sc.get("supplementalGroups", []), *([pod_sc["fsGroup"]] if "fsGroup" in pod_sc else [])]:
        flags += ["--group-add", str(gid)]
    if sc.get("privileged"):
        flags.append("--privileged")
    caps = sc.get("capabilities") or {}
    flags += [f"--cap-drop={c.lower()}" for c in caps.get("drop", [])]
    flags += [f"--cap-add={c.lower()}" for c in caps.get("add", [])]
    if sc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]  # podman would otherwise mount a writable /tmp
    seccomp = (sc.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        flags += ["--security-opt", "seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":
        raise PodSpecError(f"seccompProfile {seccomp!r} is not implemented here")
    return flags


def _mounts(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any], volumes: Mapping[str, Path], pod_dir: Path | None
) -> list[str]:
    declared = {v["name"]: v for v in pod_spec.get("volumes", [])}
    flags: list[str] = []
    for mount in container.get("volumeMounts", []):
        name = mount["name"]
        if name not in declared:
            raise PodSpecError(f"volumeMount {name!r} names no volume of the pod")
        volume = declared[name]
        source = volumes.get(name)
        if source is None and (volume.get("emptyDir") or {}).get("medium") == "Memory":
            flags += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]  # the size limit is not enforced
            continue
        if source is None and "emptyDir" in volume:
            if pod_dir is None:
                raise PodSpecError(f"emptyDir {name!r} needs pod_dir (or a directory in volumes)")
            source = pod_dir / "empty-dirs" / name
            source.mkdir(parents=True, exist_ok=True)
            source.chmod(0o777)  # the kubelet's emptyDir mode
        if source is None:
            kinds = [k for k in volume if k != "name"]
            if not any(k in _HOST_BACKED for k in kinds):
                raise PodSpecError(f"volume {name!r} of type {kinds} is not implemented here")
            raise PodSpecError(f"volume {name!r} ({kinds}) has no host directory in `volumes`")
        host = Path(source)
        if mount.get("subPath"):
            host = host / mount["subPath"]
        if not host.exists():
            raise PodSpecError(f"volume {name!r}: {host} does not exist")
        read_only = (
            bool(mount.get("readOnly"))
            or any(k in volume for k in _ALWAYS_READ_ONLY)
            or bool((volume.get("persistentVolumeClaim") or {}).get("readOnly"))
        )
        flags += ["--volume", f"{host}:{mount['mountPath']}:{'ro' if read_only else 'rw'}"]
    return flags


def _ulimits() -> list[str]:
    """This host's own open-file limit (podman's default, 1048576, can exceed the host's hard limit) and a
    process limit of at most `NPROC_CAP` (runc cannot raise RLIMIT_NPROC past its own, lower, limit on some
    hosts). RLIMIT_NPROC counts the uid's processes host-wide, across containers."""
    flags: list[str] = []
    for name, limit, cap in (("nofile", resource.RLIMIT_NOFILE, None), ("nproc", resource.RLIMIT_NPROC, NPROC_CAP)):
        soft, hard = resource.getrlimit(limit)
        if cap is not None:
            soft, hard = (cap if v == resource.RLIM_INFINITY else min(v, cap) for v in (soft, hard))
        if hard != resource.RLIM_INFINITY:
            flags += ["--ulimit", f"{name}={soft}:{hard}"]
    return flags


def image_user(image: str, podman: Sequence[str] = PODMAN) -> str | None:
    """The image's USER (None when it has none, i.e. root)."""
    out = subprocess.run(
        [*podman, "image", "inspect", "--format", "{{.Config.User}}", image],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    if out.returncode != 0:
        raise PodSpecError(f"image {image!r} is not in local storage: {out.stderr.strip()}")
    return out.stdout.strip() or None


def run_args(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    name: str,
    volumes: Mapping[str, Path] = {},
    lookup: Lookup = lambda kind, name: None,
    fields: Mapping[str, str] = {},
    pod_dir: Path | None = None,
    image: str | None = None,
    network: str = "host",
    podman: Sequence[str] = PODMAN,
) -> list[str]:
    """The `podman run --detach` command line of one container of `pod_spec`.

    Args:
        pod_spec: the pod's `spec` (for its `securityContext` and `volumes`).
        container: one entry of its `containers`.
        name: the container's name in podman (unique on the host).
        volumes: host directory of each volume by name (Secret/ConfigMap contents already written there);
            an emptyDir without one is created under `pod_dir`.
        lookup: a Secret's or ConfigMap's data, for `valueFrom` and `envFrom`.
        fields: values of `fieldRef` paths (`metadata.name`, `metadata.namespace`, `status.podIP`, ...).
        image: overrides the container's `image` (a local tag for a registry name).
        network: podman's `--network`.

    Raises:
        PodSpecError: the spec needs something missing (a Secret key, a volume directory) or not implemented.
    """
    unknown = set(container) - _CONTAINER_FIELDS
    if unknown:
        raise PodSpecError(f"container fields not implemented here: {sorted(unknown)}")
    image = image or container["image"]
    env = _env(container, lookup, fields)
    argv = [*podman, "run", "--detach", "--name", name, "--network", network, "--pull=never", *_ulimits()]
    argv += _security(pod_spec, container, lambda: image_user(image, podman))
    argv += _mounts(pod_spec, container, volumes, pod_dir)
    if container.get("workingDir"):
        argv += ["--workdir", container["workingDir"]]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    command = [expand(a, env) for a in container.get("command", [])]
    args = [expand(a, env) for a in container.get("args", [])]
    if command:  # the kubelet: `command` replaces ENTRYPOINT and drops the image's CMD
        argv += ["--entrypoint", json.dumps(command)]
    argv.append(image)
    return argv + args


def own_for_fs_group(path: Path, gid: int, *, read_only: bool = False) -> None:
    """What the kubelet does to a volume for `fsGroup`: everything group-owned by `gid`, group-readable
    (and group-writable unless `read_only`), directories setgid so that new files inherit the group."""
    rw = 0o040 if read_only else 0o060
    for root, _dirs, files in os.walk(path):
        for entry in [root, *(os.path.join(root, f) for f in files)]:
            os.chown(entry, -1, gid, follow_symlinks=False)
            mode = os.stat(entry, follow_symlinks=False).st_mode & 0o7777
            os.chmod(entry, mode | rw | (0o2010 if entry == root else 0))


def project(volume: Mapping[str, Any], data: Mapping[str, bytes] | None, directory: Path) -> None:
    """Write a Secret or ConfigMap volume's files into `directory` as the kubelet does: every key, or only
    `items` (key to path, optional mode), with `defaultMode` (0644 unless given). `data` is the object's
    decoded data, None when it does not exist. Raises PodSpecError where the kubelet would not start the pod."""
    kind, source = ("Secret", volume["secret"]) if "secret" in volume else ("ConfigMap", volume["configMap"])
    ref = source.get("secretName") or source.get("name")
    if data is None:
        if source.get("optional"):
            data = {}
        else:
            raise PodSpecError(f"volume {volume['name']!r}: {kind} {ref!r} not found")
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    directory.mkdir(parents=True, exist_ok=True)
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise PodSpecError(f"volume {volume['name']!r}: key {item['key']!r} not in {kind} {ref!r}")
        target = directory / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[item["key"]])
        target.chmod(item.get("mode", source.get("defaultMode", 0o644)))


class Container:
    """A started container (`podman run --detach`), by name; `remove` deletes it."""

    def __init__(self, name: str, podman: Sequence[str] = PODMAN) -> None:
        self.name = name
        self.podman = tuple(podman)

    @classmethod
    def start(cls, argv: Sequence[str]) -> Container:
        """Run `argv` (from `run_args`); raises RuntimeError with podman's message when it cannot start."""
        argv = list(argv)
        name = argv[argv.index("--name") + 1]
        podman = argv[: argv.index("run")]
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if out.returncode != 0:
            subprocess.run([*podman, "rm", "--force", name], capture_output=True, check=False, timeout=60)
            raise RuntimeError(f"podman run {name} failed ({out.returncode}): {out.stderr.strip()}")
        return cls(name, podman)

    def _podman(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.podman, *args], capture_output=True, text=True, check=False, timeout=timeout)

    def logs(self) -> str:
        """Everything the container wrote to stdout and stderr so far."""
        out = self._podman("logs", self.name)
        return out.stdout + out.stderr

    def state(self) -> dict[str, Any]:
        """podman's `State` of the container (Status, Running, ExitCode, OOMKilled, ...)."""
        out = self._podman("inspect", "--format", "{{json .State}}", self.name)
        if out.returncode != 0:
            raise RuntimeError(f"podman inspect {self.name}: {out.stderr.strip()}")
        return json.loads(out.stdout)

    def running(self) -> bool:
        return bool(self.state()["Running"])

    def exit_code(self) -> int | None:
        """The exit code once the container has exited, else None."""
        state = self.state()
        return int(state["ExitCode"]) if state["Status"] in ("exited", "stopped") else None

    def wait(self, timeout_s: float) -> int:
        """The exit code, waiting up to `timeout_s`; raises TimeoutError if it is still running then."""
        deadline = time.monotonic() + timeout_s
        while (code := self.exit_code()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"container {self.name} still running after {timeout_s} s")
            time.sleep(0.2)
        return code

    def exec(self, command: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        """Run `command` inside the container (an exec probe); its exit code says healthy or not."""
        return self._podman("exec", self.name, *command, timeout=timeout_s + 30)

    def stop(self, grace_s: float) -> int:
        """Stop signal (SIGTERM), then SIGKILL after `grace_s` seconds; returns the exit code."""
        self._podman("stop", "--time", str(int(grace_s)), self.name, timeout=grace_s + 60)
        return self.wait(30)

    def remove(self) -> None:
        """Delete the container (killing it if it still runs)."""
        self._podman("rm", "--force", "--time", "0", self.name)
