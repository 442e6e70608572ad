"""Run a list of methods on one scenario, one after another, saving each result as it finishes.

Methods run sequentially (never two federations at once on two cores). The single-process baseline
runs last: its token budget is the most tokens any federated run of the scenario has used, so every
method's final loss can be read against it at equal tokens.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from .cpu_shares import CpuShares
from .launch import FederatedRun, client_seed, prepare_data
from .methods import federation_for, get_method
from .references import REFERENCES, SWEEP_LRS, SWEPT, best_of_sweep, split_method, sweep, sweep_method
from .results import RESULTS_DIR, RunResult, load_all, save
from .scenario import Scenario, ScenarioError
from .single import run_single

SINGLE_MARGIN = 1.05  # train the baseline a little past the largest federated token count
SWEPT_BASES = {REFERENCES[k]: k for k in SWEPT}  # references run as a learning-rate sweep, to their letter


def say(msg: str) -> None:
    """Progress to stdout, flushed: the full benchmark runs under nohup with stdout in a file."""
    print(msg, flush=True)


def single_token_budget(runs: Sequence[RunResult]) -> int:
    """Tokens the single-process baseline must reach: the most any federated run used, plus a margin."""
    federated = [r.tokens for r in runs if r.kind == "federated"]
    if not federated or max(federated) <= 0:
        raise ScenarioError(
            "the single-process baseline needs a finished federated run of this scenario first "
            "(its token budget is the largest federated token count)"
        )
    return int(max(federated) * SINGLE_MARGIN)


def run_suite(
    scenario: Scenario,
    methods: Sequence[str],
    *,
    repeat: int = 1,
    work_root: Path = Path("runs/bench"),
    results_root: Path = RESULTS_DIR,
    log: Callable[[str], None] = say,
    cpu_share: float | None = None,
) -> list[RunResult]:
    """Run `methods` in order on `scenario`; every result is saved before the next method starts.

    `cpu_share`: CPUs each client and the PS of a federated run may use, each in its own cgroup."""
    chosen = [get_method(m) for m in methods]  # unknown names fail before anything starts
    CpuShares("check", cpu_share)  # so does a CPU share this machine cannot give
    root = work_root.resolve() / scenario.name
    data = prepare_data(scenario, root)
    out = []
    for method in chosen:
        fed = federation_for(scenario, method)
        run_dir = root / f"{method.name}-r{repeat}-{time.strftime('%Y%m%d-%H%M%S')}"
        load = os.getloadavg()[0]
        log(f"{scenario.name}: {method.name} (run {repeat}) in {run_dir} — load average {load:.2f}")
        t = time.monotonic()
        if method.kind == "single":
            budget = single_token_budget(load_all(scenario.name, results_root) + out)
            run_dir.mkdir(parents=True)
            fed_file = run_dir / "federation.yaml"
            fed_file.write_text(
                yaml.safe_dump(fed.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
            )
            if method.name in SWEPT_BASES:
                out += _sweep(scenario, method.name, fed_file, data, run_dir, budget, repeat, results_root, log)
                continue
            result = run_single(scenario, fed_file, data, run_dir, budget, method=method.name,
                                seed=client_seed(0, repeat))
            result = dataclasses.replace(result, repeat=repeat)
        else:
            result = FederatedRun(
                scenario, method.name, fed, data, run_dir, repeat=repeat, log=log, cpu_share=cpu_share
            ).run()
        result = dataclasses.replace(result, load_avg_1m=round(load, 2))
        path = save(result, results_root)
        last = result.curve[-1] if result.curve else None
        log(
            f"{scenario.name}: {method.name} done in {time.monotonic() - t:.0f} s — "
            + (
                f"final loss {last.loss:.3f} at v{last.version}, {last.tokens / 1e6:.2f} M tokens"
                if last
                else "no curve"
            )
            + f"; saved {path}"
            + "".join(f"\n  note: {n}" for n in result.notes)
        )
        out.append(result)
    return out


def _sweep(
    scenario: Scenario,
    base: str,
    fed_file: Path,
    data,
    run_dir: Path,
    budget: int,
    repeat: int,
    results_root: Path,
    log: Callable[[str], None],
) -> list[RunResult]:
    """Reference (b) or (c): one run per learning rate of SWEEP_LRS at the global batch, each saved. A later
    repeat reruns only the rate the first one kept, with another batch order (its seed's spread)."""
    from geofed.config import FederationConfig

    fed = FederationConfig.model_validate(yaml.safe_load(fed_file.read_text(encoding="utf-8")))
    batch = fed.training.batch_size * len(scenario.clients)
    rates: Sequence[float] = SWEEP_LRS
    if repeat > 1:
        kept = best_of_sweep(sweep(load_all(scenario.name, results_root), base))
        if kept is None:
            raise ScenarioError(f"repeat {repeat} of {base} reruns the rate its first sweep kept: run repeat 1 first")
        rates = [split_method(kept.method)[1]]
    out = []
    for lr in rates:
        name = sweep_method(base, lr)
        load = os.getloadavg()[0]
        result = run_single(
            scenario, fed_file, data, run_dir / f"lr{lr:g}", budget, method=name, batch_size=batch, lr=lr,
            per_client=SWEPT_BASES[base] == "c", seed=client_seed(0, repeat),
        )  # fmt: skip
        result = dataclasses.replace(result, repeat=repeat, load_avg_1m=round(load, 2))
        path = save(result, results_root)
        log(f"{scenario.name}: {name} (batch {batch}) final loss {result.curve[-1].loss:.3f} at "
            f"{result.tokens / 1e6:.2f} M tokens, load average {load:.2f}; saved {path}")  # fmt: skip
        out.append(result)
    return out
