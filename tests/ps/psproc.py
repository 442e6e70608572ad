"""Start a real `geofed ps` process on 127.0.0.1 for tests, and talk to it over real sockets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import yaml

from geofed.protocol.admin_client import AdminClient

GEOFED = [sys.executable, "-m", "geofed.cli"]


class PSProcess:
    """A PS subprocess with its working directory; restartable on the same checkpoint dir."""

    def __init__(self, workdir: Path, federation: dict | None = None, extra: list[str] | None = None) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fed_file = self.dir / "federation.yaml"
        self.fed_file.write_text(yaml.safe_dump(federation or {}))
        self.admin_file = self.dir / "admin.token"
        self.ready = self.dir / "ready"
        self.log = self.dir / "ps.log"
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = 60.0) -> PSProcess:
        """Start (or restart on the same port, so clients' addresses stay valid)."""
        self.ready.unlink(missing_ok=True)
        cmd = [*GEOFED, "ps", "--insecure", "--host", "127.0.0.1", "--port", str(self.port), "--metrics-port", "0",
               "--federation", str(self.fed_file), "--checkpoint-dir", str(self.dir / "ckpt"),
               "--admin-token-file", str(self.admin_file), "--ready-file", str(self.ready), *self.extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ,
                                         "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"})
        deadline = time.monotonic() + timeout
        while not (self.ready.exists() and self.ready.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"PS exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"PS not ready:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        self.port = int(self.ready.read_text())
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin_credential(self) -> str:
        return self.admin_file.read_text().strip()

    def admin(self) -> AdminClient:
        return AdminClient(self.address, self.admin_credential, insecure=True)

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def logs(self) -> str:
        return self.log.read_text()
