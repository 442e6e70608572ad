"""Real processes for the reliability suite: a PS in its own process group, and a reaper that always cleans up.

Every process started here runs in a new session, so a SIGKILL to its group takes the whole tree down;
`Reaper` remembers processes, proxies, clients and mounts and releases them in reverse order even when a
scenario fails half-way (tests use it through a fixture, `bench/reliability_report.py` as a context manager).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import yaml

from geofed.protocol.admin_client import AdminClient

GEOFED = [sys.executable, "-m", "geofed.cli"]
# PYTHONSAFEPATH: `python -m` must not put the repository root first on sys.path (its `operator/` folder
# would shadow the standard library's `operator`).
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HERE = Path(__file__).resolve().parent


def child_env(**extra: str) -> dict[str, str]:
    """The environment of every child process: ours plus the settings above."""
    return {**os.environ, **CHILD_ENV, **extra}


def free_port() -> int:
    """A TCP port nobody listens on right now (for the PS's metrics endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` in its own session with stdout+stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env or child_env(),
                                start_new_session=True)


def kill_group(proc: subprocess.Popen | None, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> None:
    """Signal the process group `proc` leads (it was started with a new session) and reap it."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(wait_s)


class Reaper:
    """Collects cleanups (kill a process group, stop a proxy, close a client, unmount) and runs them all."""

    def __init__(self) -> None:
        self._cleanups: list[Callable[[], None]] = []

    def add(self, cleanup: Callable[[], None]) -> None:
        self._cleanups.append(cleanup)

    def proc(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.add(lambda: kill_group(proc))
        return proc

    def close_all(self) -> None:
        """Run every cleanup, newest first; one failing cleanup does not stop the others."""
        while self._cleanups:
            cleanup = self._cleanups.pop()
            try:
                cleanup()
            except Exception as exc:  # a cleanup must never hide the scenario's own result
                print(f"reaper: cleanup failed: {exc!r}", file=sys.stderr)

    def __enter__(self) -> Reaper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for a TLS PS (and the CA its clients trust); `client_ca` turns on mTLS."""

    cert: Path
    key: Path
    ca: Path
    client_ca: Path | None = None
    admin_cert: Path | None = None  # with mTLS, the operator's own client certificate
    admin_key: Path | None = None


class PSNode:
    """One `geofed ps` process on 127.0.0.1, restartable on the same port and checkpoint directory."""

    def __init__(self, workdir: Path, federation: dict | None = None, *, extra: list[str] | None = None,
                 tls: TlsFiles | None = None, metrics: bool = False, rate_limit: float | None = 1000.0,
                 checkpoint_dir: Path | None = None) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fed_file = self.dir / "federation.yaml"
        self.fed_file.write_text(yaml.safe_dump(federation or {}))
        self.admin_file = self.dir / "admin.token"
        self.ready = self.dir / "ready"
        self.log = self.dir / "ps.log"
        self.ckpt_dir = checkpoint_dir or self.dir / "ckpt"
        self.extra = list(extra or [])
        if rate_limit is not None:
            # Most scenarios join many clients from one address at once; the rate-limit test sets its own.
            self.extra += ["--rate-limit-per-s", str(rate_limit)]
        self.tls = tls
        self.metrics_port = free_port() if metrics else 0
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.starts = 0

    def command(self) -> list[str]:
        cmd = [*GEOFED, "ps", "--host", "127.0.0.1", "--port", str(self.port),
               "--metrics-port", str(self.metrics_port), "--federation", str(self.fed_file),
               "--checkpoint-dir", str(self.ckpt_dir), "--admin-token-file", str(self.admin_file),
               "--ready-file", str(self.ready), *self.extra]
        if self.tls is None:
            return [*cmd, "--insecure"]
        cmd += ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)]
        return cmd + (["--client-ca", str(self.tls.client_ca)] if self.tls.client_ca else [])

    def start(self, timeout: float = 60.0) -> PSNode:
        """Start (or restart on the same port, so clients' addresses stay valid); wait until it listens."""
        self.ready.unlink(missing_ok=True)
        self.proc = spawn(self.command(), self.log)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not (self.ready.exists() and self.ready.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"PS exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"PS not ready after {timeout} s:\n{self.logs()[-3000:]}")
            time.sleep(0.05)
        self.port = int(self.ready.read_text())
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def admin_credential(self) -> str:
        return self.admin_file.read_text().strip()

    def admin(self) -> AdminClient:
        if self.tls is None:
            return AdminClient(self.address, self.admin_credential, insecure=True)
        t = self.tls
        return AdminClient(self.address, self.admin_credential, ca_cert=t.ca.read_bytes(),
                           client_cert=t.admin_cert.read_bytes() if t.admin_cert else None,
                           client_key=t.admin_key.read_bytes() if t.admin_key else None)

    def channel(self, *, own_connection: bool = False) -> grpc.Channel:
        """A plaintext channel; `own_connection` forces a TCP connection no other channel shares."""
        options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
        return grpc.insecure_channel(self.address, options=options)

    def status(self) -> dict:
        with self.admin() as admin:
            return admin.status()

    def kill(self) -> None:
        """SIGKILL: no checkpoint, no goodbye (a crashed or preempted PS)."""
        kill_group(self.proc)

    def terminate(self) -> int:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(60)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def rss_bytes(self) -> int:
        return psutil.Process(self.pid).memory_info().rss

    def metric(self, name: str) -> float:
        """Sum of every sample of a Prometheus metric (all label sets) scraped from the PS."""
        if not self.metrics_port:
            raise RuntimeError("this PS was started without a metrics port")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+(\S+)$", re.M)
        return sum(float(v) for v in pattern.findall(text))

    def checkpointed_versions(self) -> list[int]:
        """Versions logged as durably checkpointed, in order."""
        return [int(v) for v in re.findall(r"event=checkpoint version=(\d+)", self.logs())]


def wait_until(cond: Callable[[], object], timeout: float, what: str, period: float = 0.05):
    """Poll `cond` until it returns something truthy (returned); TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(period)
