"""A PS process for tests and benchmarks, and a reaper that always cleans up.

`PSNode` is `geofed_apps.launch.PSProcess` in its own process group (a SIGKILL takes the whole tree
down), with what scenarios inspect: TLS, the Prometheus endpoint, its RSS, the versions it checkpointed.
`Reaper` remembers processes, proxies, clients and mounts and releases them in reverse order even when
a scenario fails half-way (tests use it through a fixture, benchmarks as a context manager).
"""

from __future__ import annotations

import ctypes
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil

from geofed.protocol.admin_client import AdminClient
from geofed_apps.launch import PSProcess, free_port, stop

__all__ = ["PSNode", "Reaper", "TlsFiles", "assert_exits_with", "free_port", "signal_a_thread_other_than_main"]


class Reaper:
    """Collects cleanups (kill a process group, stop a proxy, close a client, unmount) and runs them all."""

    def __init__(self) -> None:
        self._cleanups: list[Callable[[], None]] = []

    def add(self, cleanup: Callable[[], None]) -> None:
        self._cleanups.append(cleanup)

    def proc(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.add(lambda: stop(proc, signal.SIGKILL, 10.0))
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


def assert_exits_with(proc: subprocess.Popen, expected: int, timeout_s: float, log: Path) -> None:
    """Assert that a geofed child told to stop exits with `expected` within `timeout_s`. If it has not exited
    by then, it is asked for its threads' stacks (SIGUSR1, `geofed.logs.enable_stack_dumps`); either failure
    shows the end of `log`, where its stderr goes, so a hang or a crash seen once under load says where it was."""
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2.0)
        raise AssertionError(f"pid {proc.pid} still running {timeout_s:g} s after it was told to stop; "
                             f"its stacks and last log lines:\n{_tail(log)}") from None
    assert code == expected, f"pid {proc.pid} exited {code}, not {expected}; its last log lines:\n{_tail(log)}"


def signal_a_thread_other_than_main(pid: int, sig: int) -> None:
    """Send `sig` to one of `pid`'s threads other than its main thread (tgkill), as the kernel may when it picks
    the thread that takes a process's signal. The kernel does so only sometimes (more often on a loaded
    machine) and picks the thread itself; this always picks a non-main one."""
    tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid]
    assert tids, f"pid {pid} has no thread besides its main one"
    if ctypes.CDLL(None, use_errno=True).tgkill(pid, tids[0], sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tids[0]}, {sig})")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-12000:] if log.exists() else f"({log} was not written)"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for a TLS PS (and the CA its clients trust); `client_ca` turns on mTLS."""

    cert: Path
    key: Path
    ca: Path
    client_ca: Path | None = None
    admin_cert: Path | None = None  # with mTLS, the operator's own client certificate
    admin_key: Path | None = None


class PSNode(PSProcess):
    """One `geofed ps` on 127.0.0.1 in its own process group, restartable on the same port and checkpoints.

    `rate_limit` (joins per second and address) defaults high: most scenarios join many clients from one
    address at once; `metrics` serves Prometheus on a free port.
    """

    def __init__(self, workdir: Path, federation: dict | None = None, *, extra: list[str] | None = None,
                 tls: TlsFiles | None = None, metrics: bool = False, rate_limit: float | None = 1000.0,
                 checkpoint_dir: Path | None = None) -> None:
        rate = ["--rate-limit-per-s", str(rate_limit)] if rate_limit is not None else []
        super().__init__(workdir, federation, extra=[*rate, *(extra or [])], checkpoint_dir=checkpoint_dir,
                         metrics_port=free_port() if metrics else 0, new_session=True)
        self.tls = tls

    def transport_flags(self) -> list[str]:
        if self.tls is None:
            return ["--insecure"]
        cmd = ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)]
        return cmd + (["--client-ca", str(self.tls.client_ca)] if self.tls.client_ca else [])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def admin(self) -> AdminClient:
        if self.tls is None:
            return super().admin()
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
