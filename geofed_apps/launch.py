"""Start `geofed ps` and `geofed client` processes on this machine and wait until they are up.

The one way `geofed local`, the benchmarks and the tests (through `geofed_testing`) start a
federation: the PS writes its bound port to a ready file once it listens; each client gets a one-time
token, written to a 0600 file, and its settings as `--name value` flags. Every child runs one
BLAS/OpenMP thread (the CPU cores are shared) with unbuffered logs.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Self

import yaml

if TYPE_CHECKING:
    from geofed.protocol.admin_client import AdminClient

# The `geofed` command of this interpreter (works without the console script on PATH).
GEOFED = (sys.executable, "-m", "geofed_apps")
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class StartError(RuntimeError):
    """A process exited while we waited for it; the message points at its log."""


def child_env(**extra: str) -> dict[str, str]:
    """The environment of every child process: ours, plus `CHILD_ENV`, plus `extra`."""
    return {**os.environ, **CHILD_ENV, **extra}


def flags(**values: object) -> list[str]:
    """`--name value` pairs for a `geofed` command line (underscores become dashes)."""
    return [arg for name, value in values.items() for arg in (f"--{name.replace('_', '-')}", str(value))]


def spawn(cmd: list[str], log: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None,
          new_session: bool = False) -> subprocess.Popen:
    """Start `cmd` with stdout and stderr appended to `log`.

    `new_session` puts it in its own process group, so `send` reaches the whole tree it starts.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env or child_env(), cwd=cwd,
                                start_new_session=new_session)


def send(proc: subprocess.Popen, sig: int) -> None:
    """Signal `proc`, or its whole process group when it leads one; a process already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> int | None:
    """Signal `proc` and reap it, with SIGKILL if it outlives `wait_s`; its exit code (None: never started)."""
    if proc is None:
        return None
    if proc.poll() is None:
        send(proc, sig)
        try:
            return proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            send(proc, signal.SIGKILL)
    return proc.wait(wait_s)


def stop_all(procs: list[subprocess.Popen], sig: int = signal.SIGTERM, wait_s: float = 30.0) -> list[int | None]:
    """`stop` for many at once: every one is signalled before any is waited for; their exit codes."""
    for proc in procs:
        if proc.poll() is None:
            send(proc, sig)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(wait_s))
        except subprocess.TimeoutExpired:
            codes.append(stop(proc, signal.SIGKILL, wait_s))
    return codes


def wait_until(cond: Callable[[], object], timeout: float, what: str, *, period: float = 0.05,
               dead: Callable[[], str | None] = lambda: None):
    """Poll `cond` until it returns something truthy, and return that.

    Raises TimeoutError naming `what` after `timeout` seconds, or StartError as soon as `dead` reports why
    waiting is pointless (a process it depends on exited).
    """
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        why = dead()
        if why:
            raise StartError(f"{why} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(period)


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to `bind(0)` and outgoing connections (Linux's default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port nobody listens on right now, for a process that binds it later (a PS, its status page).

    The port lies below the kernel's ephemeral range, so that nothing bound to port 0 in the meantime (a
    WAN proxy, another server) or any outgoing connection can take it before its owner binds it, or
    between a restart and the next; a port is handed out once per process.
    """
    low, _ = _ephemeral_range()
    candidates = range(10000, low) if low > 11000 else range(0)
    rng = random.SystemRandom()
    for _ in range(200 if candidates else 0):
        port = rng.choice(candidates)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # no room below the ephemeral range: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_token(path: Path, token: str) -> Path:
    """Write a credential readable by its owner only (0600, in a folder made 0700 if new)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return path


class PSProcess:
    """One plaintext `geofed ps` on 127.0.0.1, restartable on the same port and checkpoint directory.

    Its files live in `workdir`: `federation.yaml` (written from `federation` when that is a dict),
    `admin.token`, the ready file `ps.port` and `ps.log`, unless `log` / `checkpoint_dir` say otherwise.
    """

    def __init__(self, workdir: Path, federation: dict | Path | None = None, *, extra: list[str] | None = None,
                 checkpoint_dir: Path | None = None, log: Path | None = None, metrics_port: int = 0,
                 new_session: bool = False, status_port: int = 0) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        if isinstance(federation, Path):
            self.fed_file = federation
        else:
            self.fed_file = self.dir / "federation.yaml"
            self.fed_file.write_text(yaml.safe_dump(federation or {}, sort_keys=False))
        self.admin_file = self.dir / "admin.token"
        self.ready = self.dir / "ps.port"
        self.log = log or self.dir / "ps.log"
        self.ckpt_dir = checkpoint_dir or self.dir / "ckpt"
        self.extra = list(extra or [])
        self.metrics_port = metrics_port
        self.status_port = status_port  # the built-in status page (0: off)
        self.new_session = new_session
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def command(self) -> list[str]:
        """The `geofed ps` command line; later flags (`extra`) override earlier ones."""
        return [*GEOFED, "ps", *self.transport_flags(), *flags(
            host="127.0.0.1", port=self.port, metrics_port=self.metrics_port, status_port=self.status_port,
            federation=self.fed_file,
            checkpoint_dir=self.ckpt_dir, admin_token_file=self.admin_file, ready_file=self.ready,
        ), *self.extra]  # fmt: skip

    def transport_flags(self) -> list[str]:
        return ["--insecure"]

    def start(self, timeout: float = 60.0) -> Self:
        """Start (on the previous port after a restart, so clients' addresses stay valid) and wait until it
        listens; StartError or TimeoutError with the end of its log otherwise."""
        self.ready.unlink(missing_ok=True)
        self.proc = spawn(self.command(), self.log, new_session=self.new_session)
        try:
            wait_until(lambda: self.ready.is_file() and self.ready.read_text().strip(), timeout, "the PS to listen",
                       dead=self._exited)
        except (StartError, TimeoutError) as exc:
            raise type(exc)(f"{exc}; end of {self.log}:\n{self.logs()[-3000:]}") from None
        self.port = int(self.ready.read_text())
        return self

    def _exited(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"the PS exited with code {self.proc.returncode}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def status_url(self) -> str | None:
        """The status page's address (loopback: no credential needed), when it has one."""
        return f"http://localhost:{self.status_port}/" if self.status_port else None

    @property
    def admin_credential(self) -> str:
        return self.admin_file.read_text().strip()

    def admin(self) -> AdminClient:
        """An admin client; close it (or use it as a context manager)."""
        from geofed.protocol.admin_client import AdminClient

        return AdminClient(self.address, self.admin_credential, insecure=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no checkpoint, no goodbye (a crashed or preempted PS)."""
        stop(self.proc, signal.SIGKILL, 10.0)

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, which writes a final checkpoint; the exit code."""
        return stop(self.proc, signal.SIGTERM, timeout)

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_client(token: str, token_file: Path, log: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, new_session: bool = False, **options: object) -> subprocess.Popen:
    """Write `token` to `token_file` and start a plaintext `geofed client` with `--name value` per option
    (`ps`, `client_id`, `data`, `work_dir`, and any other client setting)."""
    write_token(token_file, token)
    cmd = [*GEOFED, "client", "--insecure", *flags(token_file=token_file, **options)]
    return spawn(cmd, log, env=env, cwd=cwd, new_session=new_session)
