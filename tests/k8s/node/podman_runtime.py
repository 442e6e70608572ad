"""The container runtime: each pod's container is a podman container of the image `make images` built.

`PodmanRuntime.start` turns a resolved `ContainerConfig` into `podman run --detach` with the repository's
podman flags (`geofed_testing.podman.PODMAN`: runc, cgroupfs, this host's ulimits): `--user uid:gid`,
`--group-add` for fsGroup and supplementalGroups, `--cap-drop all` plus the kept capabilities,
`no-new-privileges`, `--read-only` without podman's /tmp tmpfs, each volume bind-mounted (`:ro` when
read-only), the environment, the working directory, and the argv as entrypoint and arguments. The image's
user, environment and entrypoint come from `podman image inspect` (`image_config`).

What differs from a kubelet with a CRI runtime: containers use the host's network (`--network host`), so
declared container ports and `--<x>-port N` arguments move to free host ports as under the process
runtime, and cluster names reach pods through the /etc/hosts podman writes for the container (rewritten
when Services change); images come from local storage only (`--pull=never`); no cgroup limits.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import subprocess
from pathlib import Path

from geofed_testing.podman import PODMAN, Container, _ulimits
from geofed_testing.procs import free_port

from .images import ImageConfig
from .runtime import _port_flags, _rewrite_ports, write_hosts
from .spec import ContainerConfig


def image_config(image: str) -> ImageConfig:
    """The config of a local image, as `podman image inspect` reports it."""
    out = subprocess.run([*PODMAN, "image", "inspect", "--format", "{{json .Config}}", image],
                         capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"image {image} is not in local storage (run `make images`): {out.stderr.strip()}")
    config = json.loads(out.stdout)
    env = dict(item.split("=", 1) for item in config.get("Env") or [])
    return ImageConfig(user=config.get("User") or "0", env=env, workdir=config.get("WorkingDir") or "/",
                       entrypoint=list(config.get("Entrypoint") or []), cmd=list(config.get("Cmd") or []))  # fmt: skip


class PodmanContainer:
    """One running podman container, watched by `podman wait` and with its log followed into `log`."""

    def __init__(self, container: Container, log: Path, ports: dict[int, int]) -> None:
        self.container, self.log, self.ports = container, log, ports
        podman = list(container.podman)
        self._waiter = subprocess.Popen([*podman, "wait", container.name], stdout=subprocess.PIPE, text=True)
        with open(log, "ab") as out:
            self._logs = subprocess.Popen([*podman, "logs", "--follow", container.name], stdout=out,
                                          stderr=subprocess.STDOUT)  # fmt: skip
        inspect = container._podman("inspect", "--format", "{{.HostsPath}}", container.name)
        self.hosts = Path(inspect.stdout.strip()) if inspect.returncode == 0 and inspect.stdout.strip() else None
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None and self._waiter.poll() is not None:
            self._code = int((self._waiter.stdout.read() if self._waiter.stdout else "").strip() or 137)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._logs.wait(timeout=5)
        return self._code

    def signal(self, sig: int) -> None:
        if self.poll() is None:
            self.container._podman("kill", "--signal", signal.Signals(sig).name, self.container.name)

    def wait(self, timeout: float) -> int | None:
        try:
            self._waiter.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def exec(self, argv: list[str], timeout: float) -> int:
        try:
            return self.container.exec(_rewrite_ports(argv, self.ports), timeout).returncode
        except subprocess.TimeoutExpired:
            return 1

    def endpoint(self, container_port: int) -> tuple[str, int]:
        return "127.0.0.1", self.ports.get(container_port, container_port)

    def set_hosts(self, entries: dict[str, str]) -> None:
        if self.hosts is not None and self.poll() is None:
            write_hosts(self.hosts, entries)

    def release(self) -> None:
        self.container.remove()
        for proc in (self._waiter, self._logs):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class PodmanRuntime:
    """Pods as podman containers from local images (see the module docstring for what differs)."""

    def start(self, cfg: ContainerConfig, pod_dir: Path) -> PodmanContainer:
        ports = {port: free_port() for port in sorted(set(cfg.ports.values()) | _port_flags(cfg.argv))}
        argv = _rewrite_ports(cfg.argv, ports)
        name = f"kubelet-{pod_dir.name[:12]}-{secrets.token_hex(3)}"
        words = [*PODMAN, "run", "--detach", "--name", name, "--network", "host", "--pull", "never",
                 "--user", f"{cfg.uid}:{cfg.gid}", "--workdir", cfg.workdir, "--cap-drop", "all",
                 *_ulimits()]  # fmt: skip
        for group in cfg.groups:
            words += ["--group-add", str(group)]
        for cap in sorted(cfg.caps):
            words += ["--cap-add", cap]
        if cfg.no_new_privs:
            words += ["--security-opt", "no-new-privileges"]
        if cfg.read_only_root:
            words += ["--read-only", "--read-only-tmpfs=false"]
        for mount in cfg.mounts:
            words += ["--volume", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
        for key, value in cfg.env.items():
            words += ["--env", f"{key}={value}"]
        for host, ip in cfg.hosts.items():
            words += ["--add-host", f"{host}:{ip}"]
        words += ["--entrypoint", json.dumps(argv[:1]), cfg.image, *argv[1:]]
        return PodmanContainer(Container.start(words), pod_dir / "log", ports)
