"""Attack benchmark (issue 10): 1 of 4 clients attacks; final global eval loss against the run without it.

    .venv/bin/python bench/attack_bench.py [--runs 3] [--steps 120] [--out bench/results/attack]

Each run is a real `geofed ps` and four real `geofed client` processes on this machine, a tiny GPT-2 on
the Python standard library's sources (split by module, a held-out set for evaluation); every client trains
`--steps` local steps (a fixed amount of work, so a busy machine changes the timing, not the budget). Three
clients are honest; the fourth attacks (`bench/attack_client.py`):

- sign_flip −δ, scaled 10·δ, noise (Gaussian, 10 × δ's RMS) — it trains honestly, then poisons its push;
- corrupted — a plain client whose data is random printable text.

Aggregation is the federation default (async, K = 1, FedAvg η = 0.5, the default norm bound) and each
robust option on top of it; `nobound` turns the norm bound off (the undefended PS, and the bound's cost
on honest training). Every condition also runs without the attacker (the three honest clients alone).
Raw results: one JSON per run under `--out`, `summary.json` and `summary.md` (the table in
docs/reliability.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from client_agent.corpus import read_file_list, stdlib_split, write_file_list, write_split  # noqa: E402
from client_agent.data import load_tokens  # noqa: E402
from client_agent.tokenizer import load_tokenizer  # noqa: E402
from geofed.config import FederationConfig  # noqa: E402
from geofed_apps.evaluate import GlobalEvaluator, newest  # noqa: E402
from geofed_apps.launch import GEOFED, PSProcess, child_env, flags, spawn, stop_all, write_token  # noqa: E402

BASE = {
    "name": "attack",
    "model": {"family": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64, "seed": 0},
    "training": {"lr": 3e-3, "warmup_steps": 5, "batch_size": 8, "local_steps": 20, "sync_interval_s": 30.0,
                 "eval_every": 1_000_000, "eval_batches": 1, "keep_best": 1},
}
DEFENCES = {
    "default": {},
    "median": {"robust": "median"},
    "trimmed_mean": {"robust": "trimmed_mean", "trim_fraction": 0.25},  # 1 of 4 cut at each end
    "nobound": {"norm_bound_multiple": 0},
}
ATTACKS = ("none", "sign_flip", "scaled", "noise", "corrupted")
HONEST = 3
TIME_CAP_S = 300.0  # a client still training after this long stops anyway (a hung run, not a result)


def corrupted_data(path: Path, seed: int, size: int = 400_000) -> Path:
    """Random printable text: what a site with a broken pipeline (or a saboteur) trains on."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    (path / "noise.txt").write_bytes(rng.integers(32, 127, size, dtype=np.uint8).tobytes())
    return path


def seed_tokens(cache: Path, work_dir: Path) -> None:
    """Give a fresh client work directory the tokenised corpus (the client checks its fingerprint)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokens.npy", "tokens.json"):
        if (cache / name).is_file():
            os.link(cache / name, work_dir / name)


def run_once(run_dir: Path, defence: str, attack: str, run: int, steps: int, lists: list[Path],
             caches: list[Path]) -> dict:
    """One federation; the final global model's held-out loss and what the PS did."""
    fed_data = {**BASE, "training": {**BASE["training"], "max_steps": steps}, "aggregation": DEFENCES[defence]}
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "federation.yaml").write_text(yaml.safe_dump(fed_data, sort_keys=False))
    ps = PSProcess(run_dir, run_dir / "federation.yaml", checkpoint_dir=run_dir / "ps", log=run_dir / "ps.log",
                   extra=["--keep-checkpoints", "2", "--rate-limit-per-s", "1000"])
    procs = []
    t0 = time.monotonic()
    try:
        ps.start()
        with ps.admin() as admin:
            n = HONEST + (attack != "none")
            for i in range(n):
                client_id = f"bench.c{i}"
                token, _ = admin.create_token(client_id, ttl_s=600, master=(i == 0))
                attacker = i == HONEST
                data = lists[i]
                env = child_env()
                cmd = [*GEOFED]
                if attacker and attack == "corrupted":
                    data = corrupted_data(run_dir / "corrupted", seed=run)
                elif attacker:
                    cmd = [sys.executable, str(ROOT / "bench" / "attack_client.py")]
                    env = child_env(GEOFED_ATTACK=attack, GEOFED_ATTACK_SEED=str(run), PYTHONPATH=str(ROOT))
                if data == lists[i]:
                    seed_tokens(caches[i], run_dir / client_id)
                token_file = run_dir / "tokens" / client_id
                write_token(token_file, token)
                procs.append(spawn([*cmd, "client", "--insecure", *flags(
                    token_file=token_file, ps=ps.address, client_id=client_id, data=data,
                    work_dir=run_dir / client_id, duration_s=TIME_CAP_S, seed=10 * run + i)],
                    run_dir / f"{client_id}.log", env=env))
        for p in procs:
            p.wait(timeout=TIME_CAP_S + 120)
        status = [p.returncode for p in procs]
    finally:
        stop_all([p for p in (ps.proc, *procs) if p is not None])
    ckpt = newest(ps.ckpt_dir)
    log = ps.logs()
    clients = {}
    for i in range(HONEST + (attack != "none")):
        cid = f"bench.c{i}"
        clients[cid] = {"applied": len(re.findall(rf"event=push client={re.escape(cid)} .*status=APPLIED", log)),
                        "bounded": log.count(f"event=delta_bounded client={cid} "),
                        "refused": log.count(f"event=push_rejected client={cid} ")}
    return {"defence": defence, "attack": attack, "run": run, "seconds": time.monotonic() - t0,
            "client_exit": status, "version": ckpt.version if ckpt else 0, "clients": clients,
            "final_flat": ckpt.flat if ckpt else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120, help="local steps each client trains")
    ap.add_argument("--defences", default=",".join(DEFENCES))
    ap.add_argument("--attacks", default=",".join(ATTACKS))
    ap.add_argument("--skip", default="nobound/sign_flip,nobound/corrupted",
                    help="defence/attack cells not run (default: the two whose deltas the bound never scales)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "attack"))
    ap.add_argument("--work", default="/tmp/geofed-attack-bench")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the run's processes on the way out
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    split = stdlib_split(HONEST + 1)
    lists = write_split(split, work / "data")
    write_file_list(work / "data" / "eval.list", split.eval)
    tokenizer = load_tokenizer(None)
    caches = [work / "cache" / f"c{i}" for i in range(len(lists))]
    for files, cache in zip(lists, caches, strict=True):
        load_tokens(read_file_list(files), tokenizer, cache=cache / "tokens.npy")
    fed = FederationConfig.model_validate({**BASE})
    evaluator = GlobalEvaluator(fed, list(split.eval), work / "eval-tokens.npy")
    initial = evaluator.loss()
    print(f"initial held-out loss {initial:.4f}", flush=True)
    rows = []
    for run in range(args.runs):  # runs outermost: a slow spell of the machine hits every condition alike
        for defence in args.defences.split(","):
            for attack in args.attacks.split(","):
                if f"{defence}/{attack}" in args.skip.split(","):
                    continue
                name = f"{defence}-{attack}-run{run}"
                r = run_once(work / name, defence, attack, run, args.steps, lists, caches)
                flat = r.pop("final_flat")
                r["final_loss"] = evaluator.loss(flat) if flat is not None else float("nan")
                r["initial_loss"] = initial
                (out / f"{name}.json").write_text(json.dumps(r, indent=1))
                rows.append(r)
                print(f"{name}: loss {r['final_loss']:.4f} v{r['version']} clients={r['clients']} "
                      f"exit={r['client_exit']} {r['seconds']:.0f}s", flush=True)
    summary = summarise(rows, initial)
    summary["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    summary["command"] = " ".join(["bench/attack_bench.py", *sys.argv[1:]])
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(table(summary))
    print(table(summary))
    return 0


def summarise(rows: list[dict], initial: float) -> dict:
    cells: dict[str, list[dict]] = {}
    for r in rows:
        cells.setdefault(f"{r['defence']}/{r['attack']}", []).append(r)
    out = {"initial_loss": initial, "cells": {}}
    for key, runs in cells.items():
        losses = [r["final_loss"] for r in runs]
        sd = statistics.stdev(losses) if len(losses) > 1 else 0.0
        honest = [c for r in runs for cid, c in r["clients"].items() if int(cid.rsplit("c", 1)[1]) < HONEST]
        out["cells"][key] = {"mean": statistics.fmean(losses), "sd": sd, "runs": losses,
                             "versions": [r["version"] for r in runs],
                             "honest_applied": sum(c["applied"] for c in honest),
                             "honest_bounded": sum(c["bounded"] for c in honest)}
    return out


def table(summary: dict) -> str:
    cells = summary["cells"]
    defences = [d for d in DEFENCES if any(k.startswith(d + "/") for k in cells)]
    attacks = [a for a in ATTACKS if any(k.endswith("/" + a) for k in cells)]
    ref = cells.get("default/none")
    lines = ["| aggregation | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
    for d in defences:
        row = []
        for a in attacks:
            c = cells.get(f"{d}/{a}")
            if c is None:
                row.append("–")
                continue
            delta = f" ({c['mean'] - ref['mean']:+.3f})" if ref and a != "none" or (ref and d != "default") else ""
            row.append(f"{c['mean']:.3f} ± {c['sd']:.3f}{delta}")
        lines.append(f"| {d} | " + " | ".join(row) + " |")
    lines.append("")
    bounded = [(k, c["honest_bounded"], c["honest_applied"]) for k, c in cells.items() if not k.startswith("nobound/")]
    lines.append("Honest deltas the norm bound scaled down: " + ", ".join(
        f"{k} {b}/{a}" for k, b, a in bounded) + ".")
    lines.append("")
    lines.append(f"Final held-out loss, mean ± sd over {len(next(iter(cells.values()))['runs'])} runs "
                 f"(initial {summary['initial_loss']:.3f}); in brackets: against default aggregation without the "
                 "attacker.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
