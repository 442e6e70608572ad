"""Closed-loop attack benchmark: one hostile site among four against a real `geofed ps` with default settings.

    .venv/bin/python bench/attack_bench.py [--seeds 0,1,2] [--rounds 4] [--outers fedavg,nesterov,adam]
        [--attacks none,scaled,...] [--out bench/results/attack]

Per run: a `geofed ps` subprocess with the federation defaults (async, K = 1, the norm bound, the displacement
budget, the outer bounds) but the outer optimizer; four sites, each joined with a token of its own site. Three
honest sites train the default model (GPT-2 2 × 128) with their real AdamW
(`client_agent.training.trainer.LocalTrainer`,
default training settings, H = training.local_steps, the optimizer state kept across rounds as `geofed client` keeps
it) on their own module split of the Python standard library. Every honest push is trained from the model the
PS published last, read back over the wire (closed loop: honest sites react to what the attacker did), and
pushed in fp32 with the tokens and steps an honest client declares. After every round of the three honest
pushes the fourth site trains on its own split too, then pushes instead of its delta δ:

- honest: δ itself (not an attack: what a fourth honest site does, the yardstick for the attacks);
- scaled: 10 δ; sign_flip: −δ; noise: Gaussian of 10 × δ's RMS;
- sybil: 10 δ through 4 client ids of its site credential, one after the other, each on the newest version;
- drift: 3 × 0.95 ‖δ‖ (just under the bound it can infer from its own honest norm) along one fixed random
  direction, every round;
- ratchet: 3 × the norm of its previous push, starting at ‖δ‖, along δ.

The control is the same seed without the fourth site (the three honest sites alone, identical data and
order). Reported per run: the final held-out loss (8 fixed batches of held-out standard-library modules) and
its difference from the control's; the distance of the model from the control's model after each round and at
the end, in units of the control's mean per-version step (what one honest site's update moves the model); the
largest single-version step over the control's largest; pushes the PS refused (by reason, from its metrics)
and honest deltas it scaled down (from its log). Everything runs on this machine: the PS process, and the
trainers in this one (one thread each, one after the other), so a busy machine changes timing, not results.
Raw output: one JSON per run under `--out`, `summary.json` and `summary.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from real_clients import honest_trainers  # noqa: E402

from client_agent.connection.ps_client import PSClient  # noqa: E402
from client_agent.data.corpus import stdlib_split  # noqa: E402
from client_agent.training.flat import flatten, load_flat_, manifest  # noqa: E402
from geofed.cli_flags import apply_overrides  # noqa: E402
from geofed.config import FederationConfig  # noqa: E402
from geofed.protocol.admin_client import AdminClient  # noqa: E402
from geofed_apps.evaluate import GlobalEvaluator  # noqa: E402
from geofed_apps.local_settings import merge_settings  # noqa: E402
from geofed_testing.procs import PSNode, Reaper  # noqa: E402
from geofed_testing.wire import Observer, join, push  # noqa: E402

ATTACKS = ("none", "honest", "scaled", "sign_flip", "noise", "sybil", "drift", "ratchet")
# The outer optimizers, each at its default η (aggregation.global_lr unset): FedAvg 0.5, Nesterov 0.5 × (1 − μ)
# = 0.05 at the default μ 0.9, Adam 0.01. `--set aggregation.global_lr=...` runs another.
OUTERS = ("fedavg", "nesterov", "adam")
HONEST = 3
SYBIL_IDS = 4
SCALE = 10.0


class Site:
    """One site's trainer and its joined client(s)."""

    def __init__(self, trainer, clients: list[PSClient]) -> None:
        self.trainer, self.clients = trainer, clients

    def train_from(self, flat: np.ndarray, steps: int) -> np.ndarray:
        """Load the published model, train `steps` local steps, return the delta (float32)."""
        load_flat_(self.trainer.model, torch.from_numpy(flat.copy()))
        self.trainer.train(steps)
        return (flatten(self.trainer.model).detach().numpy() - flat).astype(np.float32)


def site_clients(ps: PSNode, site: str, ids: int, reaper: Reaper) -> list[PSClient]:
    """`ids` joined clients of `site`, their tokens minted with the site's own credential."""
    with ps.admin() as admin:
        credential = admin.create_site_credential(site)
    clients = []
    with AdminClient(ps.address, credential, insecure=True) as site_admin:
        for i in range(ids):
            cid = f"{site}.c{i}"
            token = site_admin.create_token(cid)[0]
            client = PSClient(ps.address, cid, lambda t=token: t, insecure=True)
            reaper.add(client.close)
            client.join()
            client.start()  # heartbeats, as a running client's: what keeps its site present for the round share
            clients.append(client)
    return clients


def crafted(attack: str, delta: np.ndarray, rng: np.random.Generator, direction: np.ndarray,
            last_norm: float) -> tuple[np.ndarray, float]:
    """What the attacker pushes instead of its honest float64 `delta`, and the norm a ratchet grows from next."""
    norm = float(np.linalg.norm(delta))
    if attack == "honest":  # the reference: what one more honest site does to the federation
        return delta, last_norm
    if attack in ("scaled", "sybil"):
        return SCALE * delta, last_norm
    if attack == "sign_flip":
        return -delta, last_norm
    if attack == "noise":
        return rng.standard_normal(delta.size) * SCALE * float(np.sqrt(np.mean(delta**2))), last_norm
    if attack == "drift":
        return 3 * 0.95 * norm * direction, last_norm
    last_norm = 3 * last_norm if last_norm else norm  # ratchet
    return last_norm * delta / norm, last_norm


class Published:
    """The PS's published models as an observer reads them back: the version, the model, each version's step."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.version, self.model = observer.model()
        self.steps: list[tuple[str, float]] = []  # (who, ‖θ_v − θ_{v−1}‖) per version

    def record(self, who: str) -> None:
        """Read the version `who`'s push made; it must be exactly the next one."""
        new_version, new = self.observer.model()
        if new_version != self.version + 1:
            raise RuntimeError(f"expected version {self.version + 1} after {who}'s push, the PS has {new_version}")
        self.steps.append((who, float(np.linalg.norm(new.astype(np.float64) - self.model))))
        self.version, self.model = new_version, new


def evil_pushes(evil: Site, sent: np.ndarray, published: Published, full: int, local_steps: int) -> int:
    """Push `sent` through each of the attacker's client ids on the newest version; how many were refused."""
    refused = 0
    for client in evil.clients:
        try:
            receipt = push(client, published.version, sent.astype(np.float32), tokens=full, local_steps=local_steps)
        except Exception as exc:  # a refusal (site quota): the model must not have moved
            refused += 1
            print(f"  refused {client.client_id}: {str(exc).splitlines()[0][:160]}", flush=True)
            continue
        if receipt.status != "APPLIED":
            raise RuntimeError(f"attacker push: {receipt.status}")
        published.record("evil")
    return refused


def against_control(row: dict, control: dict | None, round_models: list[np.ndarray]) -> dict:
    """The run's row with what the control needs of it (control None) or its distances from the control."""
    steps = row["steps"]
    if control is None:
        honest_steps = [s for who, s in steps if who != "evil"]
        return {**row, "mean_honest_step": statistics.fmean(honest_steps), "max_honest_step": max(honest_steps),
                "_round_models": round_models}
    unit = control["mean_honest_step"]
    distances = [float(np.linalg.norm(m.astype(np.float64) - c)) / unit
                 for m, c in zip(round_models, control["_round_models"], strict=True)]
    return {**row, "distance_per_round": distances, "final_distance": distances[-1],
            "max_step_over_control": max(s for _, s in steps) / control["max_honest_step"],
            "loss_minus_control": row["final_loss"] - control["final_loss"]}


def run_once(
    work: Path,
    seed: int,
    outer: str,
    attack: str,
    rounds: int,
    evaluator: GlobalEvaluator,
    control: dict | None,
    overrides: dict | None = None,
) -> dict:
    """One federation; per-version steps, the model after each round, the final held-out loss. `overrides`:
    settings over the defaults and the outer optimizer's (nested dicts, as `--set` builds them), read by the PS
    and, for training.*, by the sites' trainers too."""
    fed = FederationConfig.model_validate(overrides or {})
    t = fed.training
    full = t.batch_size * fed.model.block_size * t.local_steps
    trainers = honest_trainers(fed, HONEST + 1, seed)
    rng = np.random.default_rng(1000 + seed)
    t0 = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)  # a PS state left by an earlier run would be resumed, not started
    with Reaper() as reaper:
        settings = merge_settings({"aggregation": {"outer_optimizer": outer}}, overrides or {})
        ps = PSNode(work / "ps", settings, metrics=True)
        reaper.add(ps.kill)
        ps.start()
        master = join(ps, "boot.master", master=True, start=False, reaper=reaper)
        theta0 = flatten(trainers[0].model).detach().numpy().copy()
        push(master, 0, theta0, init=True, manifest=[(e.name, e.shape, e.dtype) for e in manifest(trainers[0].model)])
        sites = [Site(trainers[i], site_clients(ps, f"site{i}", 1, reaper)) for i in range(HONEST)]
        evil = None
        if attack != "none":
            evil = Site(trainers[HONEST], site_clients(ps, "evil", SYBIL_IDS if attack == "sybil" else 1, reaper))
        published = Published(Observer(ps, "observer.0"))
        honest_norms: list[float] = []
        round_models: list[np.ndarray] = []
        direction = rng.standard_normal(theta0.size)
        direction /= np.linalg.norm(direction)
        last_evil_norm, refused = 0.0, 0
        for r in range(rounds):
            for i, site in enumerate(sites):
                delta = site.train_from(published.model, t.local_steps)
                honest_norms.append(float(np.linalg.norm(delta.astype(np.float64))))
                receipt = push(site.clients[0], published.version, delta, tokens=full, local_steps=t.local_steps)
                if receipt.status != "APPLIED":
                    raise RuntimeError(f"honest push of site{i} round {r}: {receipt.status}")
                published.record(f"site{i}")
            if evil is not None:
                delta = evil.train_from(published.model, t.local_steps).astype(np.float64)
                sent, last_evil_norm = crafted(attack, delta, rng, direction, last_evil_norm)
                refused += evil_pushes(evil, sent, published, full, t.local_steps)
            round_models.append(published.model.astype(np.float32).copy())
        rejected = {
            m.group(1): float(m.group(2))
            for m in re.finditer(r'^geofed_rejected_pushes_total\{reason="([^"]+)"\} (\S+)$', metrics_text(ps), re.M)
        }
        log = ps.logs()
    bounded = {
        who: len(re.findall(rf"event=delta_bounded client='{who}\.c\d+'", log))
        for who in [f"site{i}" for i in range(HONEST)] + ["evil"]
    }
    row = {
        "seed": seed, "outer": outer, "attack": attack, "rounds": rounds, "seconds": round(time.monotonic() - t0, 1),
        "versions": published.version, "final_loss": evaluator.loss(published.model),
        "initial_loss": evaluator.loss(theta0), "steps": published.steps, "honest_delta_norms": honest_norms,
        "evil_refused": refused, "rejected_by_reason": rejected, "bounded_pushes": bounded,
        "bound_rules": sorted(set(re.findall(r"event=delta_bounded .*?rule=(\w+)", log))),
    }
    return against_control(row, control, round_models)


def metrics_text(ps: PSNode) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{ps.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def summarise(rows: list[dict]) -> str:
    """The markdown table: per outer and attack, the median and range over seeds."""

    def cell(vals: list[float], fmt: str = "{:.2f}") -> str:
        if not vals:
            return "–"
        med = fmt.format(statistics.median(vals))
        return f"{med} ({fmt.format(min(vals))}–{fmt.format(max(vals))})" if len(vals) > 1 else med

    lines = [
        "| outer | attack | final loss | loss − control's | final distance | largest distance after a round | "
        "largest version step / control's | evil pushes refused | honest deltas scaled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted(
        {(r["outer"], r["attack"]) for r in rows}, key=lambda k: (OUTERS.index(k[0]), ATTACKS.index(k[1]))
    )
    for outer, attack in keys:
        rs = [r for r in rows if r["outer"] == outer and r["attack"] == attack]
        honest_scaled = sum(v for r in rs for k, v in r["bounded_pushes"].items() if k != "evil")
        honest_total = sum(len(r["honest_delta_norms"]) for r in rs)
        if attack == "none":
            losses = [r["final_loss"] for r in rs]
            lines.append(
                f"| {outer} | none (control) | {cell(losses, '{:.3f}')} | – | – | – | – | – | "
                f"{honest_scaled}/{honest_total} |"
            )
            continue
        lines.append(
            f"| {outer} | {attack} | {cell([r['final_loss'] for r in rs], '{:.3f}')} | "
            f"{cell([r['loss_minus_control'] for r in rs], '{:+.3f}')} | {cell([r['final_distance'] for r in rs])} | "
            f"{cell([max(r['distance_per_round']) for r in rs])} | {cell([r['max_step_over_control'] for r in rs])} | "
            f"{sum(r['evil_refused'] for r in rs)} | {honest_scaled}/{honest_total} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--rounds", type=int, default=4, help="rounds of the honest sites per run")
    p.add_argument("--outers", default=",".join(OUTERS))
    p.add_argument("--attacks", default=",".join(ATTACKS))
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "attack"))
    p.add_argument("--work", default="/tmp/geofed-attack-bench")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting over the defaults (the PS reads it; the sites' trainers read training.*), e.g. "
        "aggregation.norm_bound_multiple=2 or aggregation.global_lr=0.5 (repeatable)",
    )
    args = p.parse_args()
    overrides = apply_overrides({}, args.set)
    torch.set_num_threads(1)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    attacks = [a for a in args.attacks.split(",") if a != "none"]
    rows = []
    fed = FederationConfig()
    for seed in (int(s) for s in args.seeds.split(",")):
        evaluator = GlobalEvaluator(fed, list(stdlib_split(HONEST + 1, seed=seed).eval), work / f"eval-{seed}.npy")
        for outer in args.outers.split(","):
            control = None
            for attack in ["none", *attacks]:
                name = f"{outer}-{attack}-seed{seed}"
                load = load_average()
                row = run_once(work / name, seed, outer, attack, args.rounds, evaluator, control, overrides)
                row["settings"] = args.set
                row["uptime_before"] = load
                row["uptime_after"] = load_average()
                if control is None:
                    control = row
                saved = {k: v for k, v in row.items() if not k.startswith("_")}
                (out / f"{name}.json").write_text(json.dumps(saved, indent=1))
                rows.append(saved)
                brief = {
                    k: saved.get(k)
                    for k in (
                        "final_loss",
                        "loss_minus_control",
                        "final_distance",
                        "max_step_over_control",
                        "evil_refused",
                        "seconds",
                    )
                }
                print(f"{name}: {json.dumps(brief)} | {row['uptime_before']}", flush=True)
    # The table covers every run under --out, so runs of several invocations (seeds, outers) add up.
    rows = [json.loads(f.read_text()) for f in sorted(out.glob("*-seed*.json"))]
    table = summarise(rows)
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    command = " ".join(["bench/attack_bench.py", *sys.argv[1:]])
    (out / "summary.json").write_text(json.dumps({"command": command, "machine": machine, "rows": rows}, indent=1))
    (out / "summary.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
