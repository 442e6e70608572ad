"""Container runtimes behind one small interface: `start()` gives a `Container` to signal, wait on and exec in.

`ProcessRuntime` runs a container as a local process in its own mount namespace (the node must be
root): an overlay of the host's `/` is its root filesystem (remounted read-only under
`readOnlyRootFilesystem`), every volume is bind-mounted at its real `mountPath` (read-only ones
remounted read-only), and the process starts under `setpriv` with the pod's uid, gid, supplementary
groups (fsGroup), capability bounding set and `no_new_privs`, in the container's `workingDir`.

What it does not enforce, unlike a container runtime: the image is the host's filesystem with the
test's virtualenv first on PATH (the image's own software and `ENV` paths such as `/opt/geofed/bin`
do not exist; `USER`, `ENV`, `WORKDIR`, `ENTRYPOINT` and `CMD` come from its Dockerfile); pods share
the host's network and PID namespaces, so every declared `containerPort` (and every `--<x>-port N` of
a command line: a pod's loopback-only ports) is moved to a free host port and the arguments naming
it (`--port 7443`, `--x=http://0.0.0.0:8080/...`) are rewritten; no cgroup limits, no seccomp
profile; `emptyDir` with `medium: Memory` is a plain directory; a volume mounted above the checkout
or the interpreter (`/work` over `/work/<checkout>`) gets them bound back read-only at their own
paths (an empty directory of that name appears in the volume); a uid the host's /etc/passwd lacks
gets an entry in the overlay's.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from geofed_testing.procs import free_port

from .spec import ContainerConfig

BIN = str(Path(sys.executable).parent)
# The "image": the checkout with its virtualenv, and the interpreter that virtualenv runs.
HOST_SOFTWARE = (Path(sys.prefix).resolve().parent, Path(sys.base_prefix).resolve())
_SYS = "/usr/sbin:/usr/bin:/sbin:/bin"
MOUNT, CHROOT, SETPRIV, NSENTER, UNSHARE = (shutil.which(t, path=_SYS) or t for t in
                                            ("mount", "chroot", "setpriv", "nsenter", "unshare"))  # fmt: skip


def inside(root: Path, target: str) -> str:
    """`target` in the overlay at `root`: its lower layer is the host's `/`, so symlinks resolve as there
    (`/var/run` -> `/run`), and the result stays under `root`."""
    return str(root) + os.path.realpath(target)


class Container(Protocol):
    """A started container: its main process, its log, a way to run a probe inside it."""

    log: Path

    def poll(self) -> int | None: ...

    def signal(self, sig: int) -> None: ...

    def wait(self, timeout: float) -> int | None: ...

    def exec(self, argv: list[str], timeout: float) -> int: ...

    def endpoint(self, container_port: int) -> tuple[str, int]: ...

    def set_hosts(self, entries: dict[str, str]) -> None: ...

    def release(self) -> None: ...


class Runtime(Protocol):
    def start(self, cfg: ContainerConfig, pod_dir: Path) -> Container: ...


def _exit_code(code: int | None) -> int | None:
    """A container's exit code as the runtime reports it: 128 + N for a death by signal N."""
    return None if code is None else (128 - code if code < 0 else code)


def _rewrite_ports(words: list[str], ports: dict[int, int]) -> list[str]:
    """`--port 7443`, `--metrics-port=7444` and `host:7443` in URLs name the host port instead."""
    out = list(words)
    for i, word in enumerate(out):
        if i > 0 and re.fullmatch(r"--[\w-]*port", out[i - 1]) and word.isdigit() and int(word) in ports:
            out[i] = str(ports[int(word)])
            continue
        flag = re.fullmatch(r"(--[\w-]*port=)(\d+)", word)
        if flag and int(flag.group(2)) in ports:
            out[i] = flag.group(1) + str(ports[int(flag.group(2))])
            continue
        out[i] = re.sub(r"(?<=[\w\]]:)(\d+)\b", lambda m: str(ports.get(int(m.group(1)), m.group(1))), word)
    return out


def _add_user(upper: Path, uid: int, gid: int) -> None:
    """Entries for the pod's uid and gid in the overlay's /etc/passwd and /etc/group when the host has none
    (the repository's images create their user with useradd; code such as getpass.getuser() needs one)."""
    for name, key, line in (("passwd", uid, f"geofed:x:{uid}:{gid}::/:/usr/sbin/nologin\n"),
                            ("group", gid, f"geofed:x:{gid}:\n")):  # fmt: skip
        text = Path("/etc", name).read_text()
        if any(row.split(":")[2:3] == [str(key)] for row in text.splitlines()):
            continue
        (upper / "etc").mkdir(parents=True, exist_ok=True)
        (upper / "etc" / name).write_text(text + line)


def write_hosts(path: Path, entries: dict[str, str]) -> None:
    """The host's /etc/hosts plus the cluster's names (rewritten in place: the container sees the change)."""
    extra = "".join(f"{ip}\t{name}\n" for name, ip in entries.items())
    with open(path, "w") as out:
        out.write(Path("/etc/hosts").read_text() + extra)


def _port_flags(words: list[str]) -> set[int]:
    """Ports a command line names with `--<x>-port N` or `--<x>-port=N` (a pod's loopback-only ports too)."""
    out = set()
    for i, word in enumerate(words):
        flag = re.fullmatch(r"--[\w-]*port=(\d+)", word)
        if flag:
            out.add(int(flag.group(1)))
        elif i > 0 and re.fullmatch(r"--[\w-]*port", words[i - 1]) and word.isdigit():
            out.add(int(word))
    return out


class ProcessContainer:
    def __init__(
        self, proc: subprocess.Popen, log: Path, cfg: ContainerConfig, ports: dict[int, int], hosts: Path
    ) -> None:
        self.proc, self.log, self.cfg, self.ports, self.hosts = proc, log, cfg, ports, hosts

    def set_hosts(self, entries: dict[str, str]) -> None:
        if self.proc.poll() is None:
            write_hosts(self.hosts, entries)

    def release(self) -> None:
        """Nothing to remove: the mount namespace went with the process."""

    def poll(self) -> int | None:
        return _exit_code(self.proc.poll())

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int | None:
        try:
            return _exit_code(self.proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            return None

    def exec(self, argv: list[str], timeout: float) -> int:
        """Run `argv` in the container's mount namespace, root and working directory, as its user."""
        if self.proc.poll() is not None:
            return 1
        words = [NSENTER, f"--target={self.proc.pid}", "--mount", "--root", f"--wd={self.cfg.workdir}",
                 *_setpriv(self.cfg), "--", *_rewrite_ports(argv, self.ports)]  # fmt: skip
        try:
            done = subprocess.run(words, env=self.cfg.env, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return 1
        return done.returncode

    def endpoint(self, container_port: int) -> tuple[str, int]:
        return "127.0.0.1", self.ports.get(container_port, container_port)


def _setpriv(cfg: ContainerConfig) -> list[str]:
    words = [SETPRIV, f"--reuid={cfg.uid}", f"--regid={cfg.gid}"]
    words.append(f"--groups={','.join(map(str, cfg.groups))}" if cfg.groups else "--clear-groups")
    words += ["--bounding-set=" + ",".join(["-all", *(f"+{c.lower()}" for c in sorted(cfg.caps))]), "--inh-caps=-all"]
    if cfg.no_new_privs:
        words.append("--no-new-privs")
    return words


class ProcessRuntime:
    """Containers as local processes in their own mount namespace (see the module docstring for the limits)."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the process runtime needs root (mount namespaces, setpriv to the pod's uid)")

    def start(self, cfg: ContainerConfig, pod_dir: Path) -> ProcessContainer:
        ports = {port: free_port() for port in sorted(set(cfg.ports.values()) | _port_flags(cfg.argv))}
        root, upper, work = pod_dir / "rootfs", pod_dir / "upper", pod_dir / "overlay-work"
        for path in (root, upper, work):
            path.mkdir(parents=True, exist_ok=True)
        q = shlex.quote
        lines = [
            "set -e",
            f"{MOUNT} -t overlay overlay -o lowerdir=/,upperdir={q(str(upper))},workdir={q(str(work))} {q(str(root))}",
            *(f"{MOUNT} --rbind /{d} {q(str(root / d))}" for d in ("proc", "dev", "sys")),
            f"mkdir -p {q(inside(root, cfg.workdir))}",
        ]
        interpreter = Path(os.path.realpath(sys.executable))
        # The interpreter may live in root's home (0700): other users may pass through it in this overlay only.
        lines += [f"chmod o+x {q(inside(root, str(p)))}" for p in interpreter.parents if p != Path("/")]
        _add_user(upper, cfg.uid, cfg.gid)
        hosts = upper / os.path.realpath("/etc/hosts").lstrip("/")
        hosts.parent.mkdir(parents=True, exist_ok=True)
        write_hosts(hosts, cfg.hosts)
        for mount in sorted(cfg.mounts, key=lambda m: m.target.count("/")):
            target = q(inside(root, mount.target))
            make = f"mkdir -p {target}" if mount.source.is_dir() else f"mkdir -p $(dirname {target}); touch {target}"
            lines += [make, f"{MOUNT} --bind {q(str(mount.source))} {target}"]
            if mount.read_only:
                lines.append(f"{MOUNT} -o remount,bind,ro {target}")
        for host in HOST_SOFTWARE:  # a volume mounted above the test's own software must not hide it
            if any(host == Path(m.target) or Path(m.target) in host.parents for m in cfg.mounts):
                target = q(inside(root, str(host)))
                lines += [f"mkdir -p {target}", f"{MOUNT} --bind {q(str(host))} {target}",
                          f"{MOUNT} -o remount,bind,ro {target}"]  # fmt: skip
        if cfg.read_only_root:
            lines.append(f"{MOUNT} -o remount,ro {q(str(root))}")
        argv = _rewrite_ports(cfg.argv, ports)
        lines.append(
            f"exec {CHROOT} {q(str(root))} {' '.join(map(q, _setpriv(cfg)))} -- "
            f'/bin/sh -c \'cd "$0" && exec "$@"\' {q(cfg.workdir)} {" ".join(map(q, argv))}'
        )
        env = dict(cfg.env)
        env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
        env.setdefault("HOME", "/")
        log = pod_dir / "log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [UNSHARE, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        cfg.env = env
        return ProcessContainer(proc, log, cfg, ports, hosts)


def stop(container: Container, grace: float) -> int | None:
    """SIGTERM, up to `grace` seconds, then SIGKILL: what the kubelet does to stop a container."""
    if container.poll() is not None:
        return container.poll()
    container.signal(signal.SIGTERM)
    code = container.wait(max(grace, 0.0)) if grace > 0 else None
    if code is None:
        container.signal(signal.SIGKILL)
        code = container.wait(30)
    return code
