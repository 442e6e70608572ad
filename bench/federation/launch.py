"""One federated run as real processes: a PS, N clients, and one in-process `WanProxy` per client link.

Everything a deployment does happens here on 127.0.0.1: one-time tokens, the master's Θ0 bootstrap,
compressed pushes over gRPC, model streaming, over links that delay, pace and black-hole traffic (paper
§III-B, §I). t = 0 is the moment Θ0 is on the PS (its version-1 checkpoint); the run ends at t = budget,
when clients are stopped. Losses are computed afterwards from the PS checkpoints (`evaluate.py`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from geofed.config import FederationConfig

from .accounting import client_result, delta_tokens, read_metrics, within
from .evaluate import evaluate_versions, load_flat, published
from .results import RunResult
from .scenario import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
Log = Callable[[str], None]


class RunError(RuntimeError):
    """A run that could not produce a result (PS died, no Θ0); the message points at the log."""


@dataclass(frozen=True)
class DataSplit:
    """Per-client file lists of the non-IID stdlib split and the held-out evaluation files."""

    lists: tuple[Path, ...]
    eval_files: tuple[Path, ...]


def prepare_data(scenario: Scenario, root: Path) -> DataSplit:
    """Split the stdlib corpus by module across the scenario's clients (as `geofed local` does)."""
    from client_agent.corpus import stdlib_split

    split = stdlib_split(len(scenario.clients), seed=scenario.data_seed)
    folder = root / "data"
    folder.mkdir(parents=True, exist_ok=True)
    lists = []
    for i, files in enumerate(split.clients):
        path = folder / f"client-{i}.list"
        path.write_text("".join(f"{p}\n" for p in files), encoding="utf-8")
        lists.append(path)
    return DataSplit(tuple(lists), tuple(split.eval))


def child_env() -> dict[str, str]:
    """One BLAS/OpenMP thread per process (2 shared cores), unbuffered logs.

    The single-process baseline runs as `python -m bench.federation.single` with cwd = the repo root, which
    makes `bench` importable, so PYTHONSAFEPATH (which `make` sets) is dropped for children; PYTHONPATH must
    not name the root either. The installed package's start-up imports `collections` (and so the real
    `operator`) before the working directory joins sys.path, which keeps the root's `operator/` harmless.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONSAFEPATH", None)
    return env


def flags(**values: object) -> list[str]:
    """`--name value` pairs for a `geofed` command line (underscores become dashes)."""
    return [arg for name, value in values.items() for arg in (f"--{name.replace('_', '-')}", str(value))]


def _wait_for(
    what: str, ready: Callable[[], bool], timeout_s: float, alive: Callable[[], str | None]
) -> None:
    """Poll `ready` until true; RunError when `alive` reports a death or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        dead = alive()
        if dead:
            raise RunError(f"{dead} while waiting for {what}")
        if time.monotonic() > deadline:
            raise RunError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.1)


class FederatedRun:
    """Start, time, stop and account one method's federation in one scenario."""

    def __init__(
        self,
        scenario: Scenario,
        method: str,
        fed: FederationConfig,
        data: DataSplit,
        run_dir: Path,
        *,
        repeat: int = 1,
        log: Log = lambda msg: print(msg, flush=True),
        keep_checkpoints: bool = False,
    ) -> None:
        self.scenario, self.method, self.fed, self.data = scenario, method, fed, data
        self.dir, self.repeat, self.log, self.keep = run_dir, repeat, log, keep_checkpoints
        self.procs: list[subprocess.Popen] = []
        self.proxies: list = []
        self.logs: list = []

    # ---- processes --------------------------------------------------------------------------------

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.dir / "logs" / f"{name}.log", "wb")  # noqa: SIM115 - closed in _teardown
        self.logs.append(log)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO_ROOT)
        self.procs.append(proc)
        return proc

    def _start_ps(self) -> tuple[subprocess.Popen, int]:
        (self.dir / "federation.yaml").write_text(
            yaml.safe_dump(self.fed.model_dump(mode="json"), sort_keys=False)
        )
        ready = self.dir / "ps.port"
        ps = self._spawn("ps", [sys.executable, "-m", "geofed.cli", "ps", "--insecure", *flags(
            host="127.0.0.1", port=0, metrics_port=0, federation=self.dir / "federation.yaml",
            checkpoint_dir=self.dir / "ps", checkpoint_every=1, keep_checkpoints=1_000_000,
            admin_token_file=self.dir / "admin.token", ready_file=ready,
        )])  # fmt: skip
        _wait_for(
            "the PS to listen",
            lambda: ready.is_file() and bool(ready.read_text().strip()),
            90,
            lambda: self._dead(ps, "the PS"),
        )
        return ps, int(ready.read_text().strip())

    def _dead(self, proc: subprocess.Popen, what: str) -> str | None:
        if proc.poll() is None:
            return None
        return f"{what} exited with code {proc.returncode} (see {self.dir / 'logs'})"

    def _start_clients(self, ps_port: int) -> None:
        from geofed.protocol.admin_client import AdminClient
        from geofed.wan.proxy import WanProxy

        admin_token = (self.dir / "admin.token").read_text().strip()
        tokens = self.dir / "tokens"
        tokens.mkdir(mode=0o700)
        with AdminClient(f"127.0.0.1:{ps_port}", admin_token, insecure=True) as admin:
            for i, spec in enumerate(self.scenario.clients):
                proxy = WanProxy("127.0.0.1", ps_port, spec.profile(seed=1000 * self.repeat + i))
                self.proxies.append(proxy)
                port = proxy.start()
                client_id = f"bench.client-{i}"
                token, _ = admin.create_token(client_id, site=f"site-{i}", ttl_s=900, master=(i == 0))
                fd = os.open(tokens / client_id, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(token)
                self._spawn(f"client-{i}", [sys.executable, "-m", "geofed.cli", "client", "--insecure", *flags(
                    ps=f"127.0.0.1:{port}", client_id=client_id, token_file=tokens / client_id,
                    data=self.data.lists[i], work_dir=self.dir / "clients" / f"client-{i}", seed=i,
                    slowdown=spec.slowdown, duration_s=self.scenario.budget_s + 600,
                    micro_batch_size=spec.micro_batch,
                )])  # fmt: skip

    # ---- the run ----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """The whole run; processes and proxies are always stopped, even on error."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=False)
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            ps, port = self._start_ps()
            self._start_clients(port)
            _wait_for(
                "the master's Θ0 at the PS",
                lambda: bool(published(self.dir / "ps")),
                180,
                lambda: self._dead(ps, "the PS"),
            )
            t0 = published(self.dir / "ps")[0][1]
            self.log(f"  [{self.method}] Θ0 on the PS; training for {self.scenario.budget_s:.0f} s")
            stats = self._drive(ps, t0)
            exit_codes = self._stop_clients()
        finally:
            self._teardown()
        return self._result(t0, stats, exit_codes, started)

    def _drive(self, ps: subprocess.Popen, t0: float) -> list:
        """Fire scripted outages on time until the budget is spent; return each link's byte counters then."""
        pending = sorted(
            (t0 + at, i, kind, dur)
            for i, spec in enumerate(self.scenario.clients)
            for at, kind, dur in spec.outages()
        )
        end = t0 + self.scenario.budget_s
        while (now := time.time()) < end:
            while pending and pending[0][0] <= now:
                _, i, kind, dur = pending.pop(0)
                if kind == "blackhole":
                    self.proxies[i].blackhole(dur)
                else:
                    self.proxies[i].trigger_reset(refuse_s=dur)
                self.log(f"  [{self.method}] t={now - t0:5.1f}s {kind} on client-{i}'s link for {dur:g} s")
            dead = self._dead(ps, "the PS")
            if dead:
                raise RunError(dead)
            time.sleep(min(0.2, max(0.0, end - now)))
        return [p.stats for p in self.proxies]

    def _stop_clients(self) -> list[int | None]:
        clients = self.procs[1:]
        early = [p.returncode for p in clients]  # None = still running, as it should be
        for p in clients:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in clients:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return early

    def _teardown(self) -> None:
        for p in self.procs[1:]:
            if p.poll() is None:
                p.kill()
        if self.procs and self.procs[0].poll() is None:
            self.procs[0].send_signal(signal.SIGTERM)
            try:
                self.procs[0].wait(60)
            except subprocess.TimeoutExpired:
                self.procs[0].kill()
        for proxy in self.proxies:
            proxy.stop()
        for f in self.logs:
            f.close()

    # ---- accounting -------------------------------------------------------------------------------

    def _result(self, t0: float, stats: list, exit_codes: list[int | None], started: str) -> RunResult:
        import numpy as np

        from client_agent.local import GlobalEvaluator

        end = t0 + self.scenario.budget_s
        clients, versions, toks, notes = [], [], [], []
        for i, spec in enumerate(self.scenario.clients):
            records = within(read_metrics(self.dir / "clients" / f"client-{i}" / "metrics.jsonl"), end)
            if exit_codes[i] is not None:
                notes.append(f"client-{i} exited early with code {exit_codes[i]}")
            if not records:
                notes.append(f"client-{i} finished no sync within the budget")
            clients.append(
                client_result(
                    f"client-{i}",
                    spec,
                    records,
                    bytes_up=stats[i].bytes_up,
                    bytes_down=stats[i].bytes_down,
                    exit_code=exit_codes[i],
                )
            )
            v, n = delta_tokens(records)
            versions.append(v)
            toks.append(n)
        evaluator = GlobalEvaluator(self.fed, list(self.data.eval_files), self.dir / "eval-tokens.npy")
        curve = evaluate_versions(
            self.dir / "ps",
            t0,
            self.scenario.budget_s,
            self.scenario.max_evals,
            evaluator.loss,
            np.concatenate(versions),
            np.concatenate(toks),
        )
        checkpoints = published(self.dir / "ps")
        numel = int(load_flat(checkpoints[0][2]).size)
        if not self.keep:  # ~50 MB a run: PS versions, client checkpoints and token caches
            for _, _, path in checkpoints:
                path.unlink()
            for work in (self.dir / "clients").iterdir():
                shutil.rmtree(work / "checkpoints", ignore_errors=True)
                for cache in work.glob("tokens.*"):
                    cache.unlink()
        return RunResult(
            scenario=self.scenario.name,
            method=self.method,
            kind="federated",
            budget_s=self.scenario.budget_s,
            numel=numel,
            curve=curve,
            clients=clients,
            repeat=self.repeat,
            started_at=started,
            notes=notes,
        )
