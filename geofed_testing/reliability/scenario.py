"""What every fault scenario shares: its result record, a client-process handle and the ledger verdict.

A scenario is a plain function `(workdir, reaper) -> ScenarioResult`, so `tests/reliability` and
`bench/reliability_report.py` run the very same code. A scenario raises `ScenarioFailed` (an
AssertionError) with the evidence when an invariant breaks; otherwise its result lists what it checked.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from client_agent.connection.model_waits import DEFERRED_WAIT_S
from geofed_apps.launch import child_env, spawn, stop, wait_until
from geofed_testing.ledger import EXACT_ASYNC, Accounting, account, delta_for
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import Observer, init_model, join, mint, theta0

from .client_proc import read_events

CHECKOUT = Path(__file__).resolve().parents[2]  # geofed_testing is not installed: it runs from the checkout


def checkout_env() -> dict[str, str]:
    """A child's environment with the checkout first on its import path (for `python -m geofed_testing...`)."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    return env


class ScenarioFailed(AssertionError):
    """An invariant broke; the message carries the evidence, `result` what was measured up to then."""

    def __init__(self, message: str, result: ScenarioResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class ScenarioResult:
    """One row of the reliability table."""

    name: str
    injected: str
    outcome: str = ""
    resume_s: float | None = None  # fault (or recovery start) -> federation progressing again
    lost: int = 0  # acknowledged deltas missing from the model
    twice: int = 0  # deltas applied more than once
    checks: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    failed: str = ""  # the first check that failed, with its evidence

    def check(self, ok: bool, what: str, evidence: object = "") -> None:
        """Record a passed check, or raise with `evidence`."""
        if not ok:
            self.failed = f"{what}: {evidence}".rstrip(": ")
            raise ScenarioFailed(f"{self.name}: {what} FAILED {evidence}".rstrip(), self)
        self.checks.append(what)


@dataclass
class Federation:
    """A PS with θ_0 installed by an in-process master, plus an observer reading the global model."""

    ps: PSNode
    theta0: np.ndarray
    observer: Observer
    numel: int

    reaper: Reaper

    @classmethod
    def start(cls, workdir: Path, reaper: Reaper, numel: int, *, federation: dict | None = None,
              extra: list[str] | None = None, install: bool = True, **ps_kw) -> Federation:
        """Start the PS; with `install`, θ_0 goes in at once (else call `install()` after joining clients)."""
        ps = PSNode(workdir / "ps", federation or EXACT_ASYNC, extra=extra, **ps_kw)
        reaper.add(ps.kill)
        ps.start()
        fed = cls(ps, theta0(numel), Observer(ps), numel, reaper)
        if install:
            fed.install()
        return fed

    def install(self) -> None:
        """The master's bootstrap (Fig. 1 step 2): θ_0 becomes v1, and the PS checkpoints it."""
        master = join(self.ps, "fed.master", master=True, start=False, reaper=self.reaper)
        receipt = init_model(master, self.theta0)
        if (receipt.status, receipt.version) != ("APPLIED", 1):
            raise ScenarioFailed(f"bootstrap failed: {receipt}")
        master.close()

    def ledger(self, attempted: set[str], receipted: set[str], result: ScenarioResult) -> tuple[int, Accounting]:
        """Check the model against θ_0 + Σ attempted deltas; record lost/twice on `result`."""
        version, model = self.observer.model()
        acc = account(model, self.theta0, {t: delta_for(t, self.numel) for t in attempted})
        lost = acc.lost(receipted)
        result.lost, result.twice = len(lost), len(acc.twice)
        result.details.update(version=version, applied=len(acc.applied), attempted=len(attempted),
                              acknowledged=len(receipted), residual=acc.residual)
        result.check(acc.residual < 1e-4, "model = θ0 + Σ of whole deltas (independent recomputation)",
                     f"residual {acc.residual:.2e}, stray coefficients {sorted(acc.stray)[:5]}")
        result.check(not acc.stray, "every delta counted 0 or 1 times", sorted(acc.stray)[:5])
        result.check(not acc.twice, "no delta applied twice", sorted(acc.twice))
        result.check(not lost, "every acknowledged delta is in the model", sorted(lost))
        result.check(version == 1 + len(acc.applied), "global version = 1 + deltas applied (K = 1)",
                     f"version {version}, applied {len(acc.applied)}")
        return version, acc


class ClientProc:
    """A `client_proc` process in its own process group; relaunch with `start()` on the same state directory."""

    def __init__(self, reaper: Reaper, workdir: Path, address: str, client_id: str, token: str, numel: int,
                 rounds: int, ballast_floats: int = 0, pause_s: float = 0.0,
                 deferred_wait_s: float = DEFERRED_WAIT_S, start_file: Path | None = None) -> None:
        self.reaper, self.dir, self.client_id = reaper, workdir, client_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.dir / "token"
        self.token_file.write_text(token)
        self.events_file = self.dir / "events.jsonl"
        self.state = self.dir / "state"
        self.args = ["--ps", address, "--client-id", client_id, "--token-file", str(self.token_file),
                     "--state-dir", str(self.state), "--events", str(self.events_file), "--rounds", str(rounds),
                     "--numel", str(numel), "--ballast-floats", str(ballast_floats), "--pause-s", str(pause_s),
                     "--deferred-wait-s", str(deferred_wait_s)]
        if start_file is not None:
            self.args += ["--start-file", str(start_file)]
        self.proc = None

    def start(self) -> ClientProc:
        cmd = [sys.executable, "-m", "geofed_testing.reliability.client_proc", *self.args]
        self.proc = self.reaper.proc(spawn(cmd, self.dir / "client.log", env=checkout_env(), new_session=True))
        return self

    def kill(self) -> float:
        """SIGKILL the process group; returns the monotonic time of the kill."""
        t = time.monotonic()
        stop(self.proc, signal.SIGKILL, 10.0)
        return t

    def events(self, kind: str | None = None) -> list[dict]:
        evs = read_events(self.events_file)
        return [e for e in evs if kind is None or e["event"] == kind]

    def wait_event(self, pred, timeout: float, what: str) -> dict:
        def found():
            if self.proc is not None and self.proc.poll() not in (None, 0):
                raise ScenarioFailed(f"{self.client_id} exited with {self.proc.returncode}: {self.log_tail()}")
            return next((e for e in self.events() if pred(e)), None)

        return wait_until(found, timeout, f"{self.client_id}: {what}", period=0.005)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        rc = self.proc.wait(timeout)
        if rc != 0:
            raise ScenarioFailed(f"{self.client_id} exited with {rc}: {self.log_tail()}")
        return rc

    def log_tail(self) -> str:
        log = self.dir / "client.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else ""

    def attempted(self) -> set[str]:
        return {e["tag"] for e in self.events("push_begin")}

    def receipted(self) -> set[str]:
        return {e["tag"] for e in self.events("receipt")}


def new_client(fed: Federation, reaper: Reaper, workdir: Path, client_id: str, address: str | None = None,
               **kw) -> ClientProc:
    """A client process with a fresh one-time token, not yet started."""
    return ClientProc(reaper, workdir / client_id, address or fed.ps.address, client_id, mint(fed.ps, client_id),
                      fed.numel, **kw)
