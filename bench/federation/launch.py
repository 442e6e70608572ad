"""One federated run as real processes: a PS, N clients, and one in-process `WanProxy` per client link.

Everything a deployment does happens here on 127.0.0.1: one-time tokens, the master's Θ0 bootstrap,
compressed pushes over gRPC, model streaming, over links that delay, pace and black-hole traffic (paper
§III-B, §I). t = 0 is the moment Θ0 is on the PS (its version-1 checkpoint); the run ends at t = budget,
when clients are stopped. Losses are computed afterwards from the PS checkpoints (`evaluate.py`).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from geofed.config import FederationConfig
from geofed_apps.evaluate import load_flat, published
from geofed_apps.launch import PSProcess, StartError, start_client, stop_all, wait_until

from .accounting import client_result, delta_tokens, read_metrics, within
from .cpu_shares import CpuShares
from .evaluate import evaluate_versions
from .results import RunResult
from .scenario import Scenario

Log = Callable[[str], None]


def client_seed(index: int, repeat: int) -> int:
    """Client `index`'s data seed in repeat `repeat`: its index in the first (every run saved before repeats
    varied the seed), 1000 more per later repeat, so the repeats of a method see other batches."""
    return index + 1000 * (repeat - 1)


class RunError(RuntimeError):
    """A run that could not produce a result (PS died, no Θ0); the message points at the log."""


@dataclass(frozen=True)
class DataSplit:
    """Per-client file lists of the non-IID stdlib split and the held-out evaluation files."""

    lists: tuple[Path, ...]
    eval_files: tuple[Path, ...]


def prepare_data(scenario: Scenario, root: Path) -> DataSplit:
    """Split the stdlib corpus by module across the scenario's clients (as `geofed local` does)."""
    from client_agent.data.corpus import stdlib_split, write_split

    split = stdlib_split(len(scenario.clients), seed=scenario.data_seed)
    return DataSplit(tuple(write_split(split, root / "data")), tuple(split.eval))


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
        cpu_share: float | None = None,
    ) -> None:
        """`cpu_share`: CPUs each client and the PS may use, each in its own cgroup (`cpu_shares.py`);
        None lets them share the machine's cores."""
        self.scenario, self.method, self.fed, self.data = scenario, method, fed, data
        self.shares = CpuShares(f"{method}-r{repeat}-{run_dir.name}", cpu_share)
        self.dir, self.repeat, self.log, self.keep = run_dir, repeat, log, keep_checkpoints
        self.ps: PSProcess | None = None
        self.clients: list[subprocess.Popen] = []
        self.proxies: list = []

    # ---- processes --------------------------------------------------------------------------------

    def _start_ps(self) -> PSProcess:
        (self.dir / "federation.yaml").write_text(
            yaml.safe_dump(self.fed.model_dump(mode="json"), sort_keys=False)
        )
        self.ps = PSProcess(self.dir, self.dir / "federation.yaml", checkpoint_dir=self.dir / "ps",
                            log=self.dir / "logs" / "ps.log",
                            extra=["--checkpoint-every", "1", "--keep-checkpoints", "1000000"])
        try:
            ps = self.ps.start(timeout=90)
        except (StartError, TimeoutError) as exc:
            raise RunError(f"{str(exc).splitlines()[0]} (see {self.dir / 'logs'})") from None
        self.shares.place("ps", ps.proc.pid)
        return ps

    def _dead(self) -> str | None:
        if self.ps is None or self.ps.alive():
            return None
        return f"the PS exited with code {self.ps.proc.returncode} (see {self.dir / 'logs'})"

    def _start_clients(self, ps: PSProcess) -> None:
        """One client per scenario entry, each behind its own WAN proxy, seeded by `client_seed`."""
        from geofed_apps.wan.proxy import WanProxy

        with ps.admin() as admin:
            for i, spec in enumerate(self.scenario.clients):
                proxy = WanProxy("127.0.0.1", ps.port, spec.profile(seed=1000 * self.repeat + i))
                self.proxies.append(proxy)
                port = proxy.start()
                client_id = f"bench.client-{i}"
                token, _ = admin.create_token(client_id, site=f"site-{i}", ttl_s=900, master=(i == 0))
                self.clients.append(start_client(
                    token, self.dir / "tokens" / client_id, self.dir / "logs" / f"client-{i}.log",
                    ps=f"127.0.0.1:{port}", client_id=client_id, data=self.data.lists[i],
                    work_dir=self.dir / "clients" / f"client-{i}", seed=client_seed(i, self.repeat),
                    slowdown=spec.slowdown,
                    duration_s=self.scenario.budget_s + 600, micro_batch_size=spec.micro_batch,
                ))  # fmt: skip
                self.shares.place(f"client-{i}", self.clients[-1].pid)

    # ---- the run ----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """The whole run; processes and proxies are always stopped, even on error."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=False)
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            ps = self._start_ps()
            self._start_clients(ps)
            try:
                wait_until(lambda: published(ps.ckpt_dir), 180, "the master's Θ0 at the PS", period=0.1,
                           dead=self._dead)
            except (StartError, TimeoutError) as exc:
                raise RunError(str(exc)) from None
            t0 = published(ps.ckpt_dir)[0][1]
            self.log(f"  [{self.method}] Θ0 on the PS; training for {self.scenario.budget_s:.0f} s")
            stats = self._drive(t0)
            exit_codes = self._stop_clients()
        finally:
            self._teardown()
        return self._result(t0, stats, exit_codes, started)

    def _drive(self, t0: float) -> list:
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
            dead = self._dead()
            if dead:
                raise RunError(dead)
            time.sleep(min(0.2, max(0.0, end - now)))
        return [p.stats for p in self.proxies]

    def _stop_clients(self) -> list[int | None]:
        early = [p.poll() for p in self.clients]  # None = still running, as it should be
        stop_all(self.clients)
        return early

    def _teardown(self) -> None:
        stop_all(self.clients, signal.SIGKILL)
        if self.ps is not None:
            self.ps.terminate()
        for proxy in self.proxies:
            proxy.stop()
        self.shares.close()

    # ---- accounting -------------------------------------------------------------------------------

    def _result(self, t0: float, stats: list, exit_codes: list[int | None], started: str) -> RunResult:
        import numpy as np

        from geofed_apps.evaluate import GlobalEvaluator

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
            cpu_share=self.shares.cpus,
        )
