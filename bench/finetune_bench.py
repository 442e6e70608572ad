"""Federated fine-tuning benchmark: every paradigm and central fine-tuning, the table in docs/benchmarks.md.

python bench/finetune_bench.py [--runs 3] [--steps 250] [--clients 2] [--rows lora,zo,...]

Each federated row is `geofed local --paradigm NAME` with every client stopping after `--steps` local
steps (training.max_steps), so a row's token budget is clients × steps × batch × block; the central rows
train one process for clients × steps batches on the union of the clients' pairs (bench/finetune_central.py).
Raw outputs go to bench/results/finetune/<row>-<run>.txt and .json; `--report` rebuilds the table from them.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = BENCH / "results" / "finetune"
# row -> (kind, paradigm preset, extra --set overrides)
ROWS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "central-full": ("central", "pretrain", ()),
    "central-lora": ("central", "lora", ()),
    "lora": ("fed", "lora", ()),
    "lora-product": ("fed", "lora", ("paradigm.aggregation=product",)),
    "hybrid-lora": ("fed", "hybrid-lora", ()),
    "ravan": ("fed", "ravan", ()),
    "zo": ("fed", "zo", ()),
}
_LINE = re.compile(r"^(exact match|F1|eval loss): ([0-9.]+) -> ([0-9.]+)$", re.M)
_RECEIVED = re.compile(r"event=model_received version=(\d+) encoding=(\S+) bytes=(\d+)")


def _summary(stdout: str) -> dict:
    found = {m.group(1): [float(m.group(2)), float(m.group(3))] for m in _LINE.finditer(stdout)}
    if len(found) != 3:
        raise RuntimeError(f"the run did not end with its summary lines:\n{stdout[-2000:]}")
    return {"em": found["exact match"], "f1": found["F1"], "eval_loss": found["eval loss"]}


def _trainable(paradigm: str, overrides: tuple[str, ...]) -> tuple[int, int]:
    """(trainable, exchanged) parameter counts of the preset's model."""
    from client_agent.paradigms import client_paradigm
    from geofed.cli_flags import apply_overrides
    from geofed.config import FederationConfig
    from geofed_apps.finetune.base_model import ensure_base_model
    from geofed_apps.finetune.preset import preset_settings
    from geofed_apps.local import LOCAL_DEFAULTS, merge_settings

    fed = FederationConfig.model_validate(apply_overrides(
        merge_settings(LOCAL_DEFAULTS, preset_settings(paradigm, ensure_base_model())), list(overrides)))
    p = client_paradigm(fed.paradigm)
    model = p.prepare(p.build(fed, initialise=True))
    trainable = sum(q.numel() for n, q in model.named_parameters() if p.trainable(n, q))
    return trainable, sum(t.numel for t in p.manifest(model))


def _traffic(run: Path) -> tuple[float, float, int]:
    """Mean bytes up and down per round per client (down: after each client's first, whole-model transfer)."""
    ups, downs, rounds = [], [], 0
    for work in sorted((run / "clients").iterdir()):
        recs = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
        ups += [r["payload_bytes"] for r in recs]
        rounds += len(recs)
        log = (run / "logs" / f"{work.name}.log").read_text()
        downs += [int(m.group(3)) for m in _RECEIVED.finditer(log)][1:]
    return statistics.mean(ups), statistics.mean(downs) if downs else 0.0, rounds


def run_fed(row: str, paradigm: str, overrides: tuple[str, ...], i: int, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "geofed_apps", "local", "--paradigm", paradigm, "--clients", str(args.clients),
               "--duration", str(args.max_seconds), "--run-dir", tmp, "--quiet",
               "--set", f"training.max_steps={args.steps}", *[a for o in overrides for a in ("--set", o)]]
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.max_seconds + 600)
        wall = time.monotonic() - t0
        (OUT / f"{row}-{i}.txt").write_text(out.stdout)
        if out.returncode != 0:
            raise RuntimeError(f"{row} run {i} exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.M).group(1))
        up, down, rounds = _traffic(run)
    return {**_summary(out.stdout), "up_bytes": up, "down_bytes": down, "rounds": rounds, "wall_s": wall}


def run_central(row: str, paradigm: str, i: int, args) -> dict:
    cmd = [sys.executable, "-m", "bench.finetune_central", "--paradigm", paradigm,
           "--steps", str(args.steps * args.clients), "--clients", str(args.clients), "--seed", str(i)]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    wall = time.monotonic() - t0
    (OUT / f"{row}-{i}.txt").write_text(out.stdout)
    if out.returncode != 0:
        raise RuntimeError(f"{row} run {i} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return {**_summary(out.stdout), "up_bytes": 0.0, "down_bytes": 0.0, "rounds": 0, "wall_s": wall}


def _cell(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def report() -> str:
    """The markdown table from bench/results/finetune/*.json."""
    lines = ["| row | trainable params | exchanged params | up B/round/client | down B/round/client | exact match "
             "| F1 | eval loss | wall-clock s | runs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in ROWS:
        runs = [json.loads(p.read_text()) for p in sorted(OUT.glob(f"{row}-[0-9]*.json"))]
        if not runs:
            continue
        em, f1 = [r["em"][1] for r in runs], [r["f1"][1] for r in runs]
        loss = [r["eval_loss"][1] for r in runs]
        fed = runs[0]["rounds"] > 0
        traffic = [_cell([r["up_bytes"] for r in runs], ".0f"), _cell([r["down_bytes"] for r in runs], ".0f")] \
            if fed else ["—", "—"]
        lines.append(f"| {row} | {runs[0]['trainable']:,} | {runs[0]['exchanged']:,} | {traffic[0]} | {traffic[1]} "
                     f"| {_cell(em, '.1f')} | {_cell(f1, '.1f')} | {_cell(loss, '.2f')} "
                     f"| {_cell([r['wall_s'] for r in runs], '.0f')} | {len(runs)} |")
    base = next((json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))), None)
    if base is not None:
        lines.append(f"| base model (before) | — | — | — | — | {base['em'][0]:.1f} | {base['f1'][0]:.1f} "
                     f"| {base['eval_loss'][0]:.2f} | — | — |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=250, help="local steps per client (training.max_steps)")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=900.0, help="upper bound on one federated run")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows to run")
    parser.add_argument("--report", action="store_true", help="only print the table from saved results")
    parser.add_argument("--again", action="store_true", help="re-measure runs that have saved results")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results/finetune)")
    args = parser.parse_args(argv)
    global OUT
    OUT = args.out or OUT
    if not args.report:
        OUT.mkdir(parents=True, exist_ok=True)
        for row in args.rows.split(","):  # row by row: a cut-short benchmark leaves whole rows
            for i in range(args.runs):
                if (OUT / f"{row}-{i}.json").exists() and not args.again:
                    continue  # measured already (a resumed benchmark)
                kind, paradigm, overrides = ROWS[row]
                result = run_central(row, paradigm, i, args) if kind == "central" else \
                    run_fed(row, paradigm, overrides, i, args)
                trainable, exchanged = _trainable(paradigm, overrides)
                result.update(trainable=trainable, exchanged=exchanged if kind == "fed" else 0,
                              steps_per_client=args.steps, clients=args.clients)
                (OUT / f"{row}-{i}.json").write_text(json.dumps(result, indent=1))
                print(f"{row} run {i}: F1 {result['f1'][1]:.1f}, EM {result['em'][1]:.1f}, "
                      f"{result['wall_s']:.0f}s", flush=True)
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
