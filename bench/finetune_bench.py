"""Federated fine-tuning benchmark: every paradigm, central fine-tuning and trivial rules, for docs/benchmarks.md.

python bench/finetune_bench.py [--runs 3] [--steps 300] [--clients 2] [--rows lora,zo,...] [--report]

Each federated row is `geofed local --paradigm NAME --seed RUN` with every client stopping after `--steps`
local steps (training.max_steps), so its token budget is clients × steps × batch × block; run RUN's seed
sets the clients' data order and which modules go to which client. Central rows train one process on
the union of the clients' pairs (bench/finetune_central.py, data order seeded by RUN): `central-*` for
clients × steps batches (equal tokens), `central-*-steps` for `steps` batches (equal sequential steps).
`zo-wallclock` gives zeroth-order the clients' median training seconds of the `lora` row instead of a
step count (it is forward-only: equal wall-clock). The `rule` row is the best few-line rule of
geofed_apps/finetune/rules.py (all of them in rule.json). Every run records the base model's content
hash, the commit of the paradigm algorithms and the 1-minute load average when it started.
Raw outputs go to bench/results/finetune/<row>-<run>.txt and .json; `--report` rebuilds the table.
`--task stdlib-package --out DIR` runs every row on the second task (which package a docstring comes from),
each run on the held-out pairs of its seed; its `rule` row is that task's rules, the median over the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
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
ALGORITHMS = ("client_agent/paradigms", "ps_server/aggregation/strategies")
# row -> (kind, paradigm preset, extra --set overrides)
ROWS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "central-full": ("central", "pretrain", ()),
    "central-full-steps": ("central-steps", "pretrain", ()),
    "central-lora": ("central", "lora", ()),
    "central-lora-steps": ("central-steps", "lora", ()),
    "central-ravan": ("central", "ravan", ()),
    "central-ravan-matched": ("central", "ravan-matched", ()),
    "central-ravan-matched-steps": ("central-steps", "ravan-matched", ()),
    "central-bitfit": ("central", "bitfit", ()),
    "lora": ("fed", "lora", ()),
    "hybrid-lora": ("fed", "hybrid-lora", ()),
    "ravan": ("fed", "ravan", ()),
    "ravan-matched": ("fed", "ravan-matched", ()),
    "zo": ("fed", "zo", ()),
    "zo-lora": ("fed", "zo-lora", ()),
    "zo-wallclock": ("fed-wallclock", "zo", ()),
}
_LINE = re.compile(r"^(exact match|F1|eval loss|own-domain F1|closed-set accuracy): ([0-9.]+) -> ([0-9.]+)$", re.M)
_BASE = re.compile(r"^base model: sha256 ([0-9a-f]{64})", re.M)
_INTERVAL = re.compile(r"^95% interval on .+$", re.M)
_RECEIVED = re.compile(r"event=model_received version=(\d+) encoding=(\S+) bytes=(\d+)")


def _summary(stdout: str) -> dict:
    found = {m.group(1): [float(m.group(2)), float(m.group(3))] for m in _LINE.finditer(stdout)}
    base = _BASE.search(stdout)
    interval = _INTERVAL.search(stdout)
    if not {"exact match", "F1", "eval loss"} <= found.keys() or (base is None and interval is None):
        raise RuntimeError(f"the run did not end with its summary lines:\n{stdout[-2000:]}")
    # a --task run scores one held-out set and states its 95 % interval; the docstring task has own-domain F1
    summary = {"em": found["exact match"], "f1": found["F1"], "eval_loss": found["eval loss"]}
    if "own-domain F1" in found:
        summary["own_f1"] = found["own-domain F1"]
    if "closed-set accuracy" in found:  # a classification task: the likeliest label's accuracy
        summary["closed_set"] = found["closed-set accuracy"]
    if base:
        summary["base_sha256"] = base[1]
    if interval:
        summary["interval"] = interval[0]
    return summary


def _commit(paths: tuple[str, ...] = ()) -> str:
    """The newest commit touching `paths` (all of HEAD when empty), with `+dirty` when they have local edits."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "log", "-1", "--format=%h", "--", *paths], capture_output=True, text=True).stdout
    dirty = subprocess.run([*git, "status", "--porcelain", "--", *paths], capture_output=True, text=True).stdout
    return commit.strip() + ("+dirty" if dirty.strip() else "")


def _trainable(paradigm: str, overrides: tuple[str, ...]) -> tuple[int, int]:
    """(trainable, exchanged) parameter counts of the preset's model."""
    from client_agent.paradigms import client_paradigm
    from geofed.cli_flags import apply_overrides
    from geofed.config import FederationConfig
    from geofed_apps.finetune.base_model import ensure_base_model
    from geofed_apps.finetune.preset import preset_settings, with_base_targets
    from geofed_apps.local_settings import LOCAL_DEFAULTS, merge_settings

    base = ensure_base_model()
    settings = merge_settings(LOCAL_DEFAULTS, preset_settings(paradigm, base))
    # the adapter layers `geofed local` wraps on the built-in base
    settings = with_base_targets(apply_overrides(settings, list(overrides)), str(base))
    fed = FederationConfig.model_validate(settings)
    p = client_paradigm(fed.paradigm)
    model = p.prepare(p.build(fed, initialise=True))
    trainable = sum(q.numel() for n, q in model.named_parameters() if p.trainable(n, q))
    return trainable, sum(t.numel for t in p.manifest(model))


def _traffic(run: Path) -> dict:
    """Bytes up and down per round per client (down: after each client's first, whole-model transfer), the
    rounds, and the clients' training seconds (the latest metrics record of any client)."""
    ups, downs, rounds, train_s = [], [], 0, 0.0
    for work in sorted((run / "clients").iterdir()):
        recs = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
        ups += [r["payload_bytes"] for r in recs]
        rounds += len(recs)
        log = (run / "logs" / f"{work.name}.log").read_text()
        downs += [int(m.group(3)) for m in _RECEIVED.finditer(log)][1:]
    per_client: dict[str, list[dict]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "client" in rec:
            train_s = max(train_s, rec["elapsed_s"])
            per_client.setdefault(rec["client"], []).append(rec)
    # At the socket (`geofed local --link`): each client's bytes between its first and last record, per round.
    linked = [r for r in per_client.values() if len(r) > 1 and "link_up_bytes" in r[0]]
    socket = {
        f"socket_{way}_bytes": statistics.mean(
            (r[-1][f"link_{way}_bytes"] - r[0][f"link_{way}_bytes"]) / (len(r) - 1) for r in linked
        )
        for way in ("up", "down")
    } if linked else {}
    return {
        "up_bytes": statistics.mean(ups),
        "down_bytes": statistics.mean(downs) if downs else 0.0,
        **socket,
        "rounds": rounds,
        "train_s": train_s,
    }


def _zo_seconds() -> float:
    runs = [json.loads(p.read_text()) for p in sorted(OUT.glob("lora-[0-9]*.json"))]
    if not runs:
        raise RuntimeError("zo-wallclock takes the lora row's training seconds: run the lora row first")
    return statistics.median(r["train_s"] for r in runs)


def run_fed(row: str, kind: str, paradigm: str, overrides: tuple[str, ...], i: int, args) -> dict:
    if kind == "fed-wallclock":
        budget = ["--duration", f"{_zo_seconds():.0f}"]
    else:
        budget = ["--duration", str(args.max_seconds), "--set", f"training.max_steps={args.steps}"]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "geofed_apps",
            "local",
            "--paradigm",
            paradigm,
            "--clients",
            str(args.clients),
            "--run-dir",
            tmp,
            "--quiet",
            "--seed",
            str(i),
            "--link",
            "0ms",  # shapes nothing; counts each client's bytes at the socket
            *budget,
            *[a for o in (*overrides, *args.set) for a in ("--set", o)],
            *(["--renamings", str(args.renamings)] if args.renamings else []),
            *(["--task", args.task] if args.task != "docstring-params" else []),
        ]
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.max_seconds + 600)
        wall = time.monotonic() - t0
        (OUT / f"{row}-{i}.txt").write_text(" ".join(cmd[1:]) + "\n" + out.stdout)
        if out.returncode != 0:
            raise RuntimeError(f"{row} run {i} exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.M).group(1))
        traffic = _traffic(run)
    return {**_summary(out.stdout), **traffic, "wall_s": wall}


def run_central(row: str, kind: str, paradigm: str, i: int, args) -> dict:
    steps = args.steps * args.clients if kind == "central" else args.steps
    cmd = [
        sys.executable,
        "-m",
        "bench.finetune_central",
        "--paradigm",
        paradigm,
        "--steps",
        str(steps),
        "--clients",
        str(args.clients),
        "--seed",
        str(i),
        *(["--renamings", str(args.renamings)] if args.renamings else []),
        *(["--task", args.task] if args.task != "docstring-params" else []),
        *[a for o in (f"training.max_steps={steps}", *args.set) for a in ("--set", o)],  # a decay's end
    ]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    wall = time.monotonic() - t0
    (OUT / f"{row}-{i}.txt").write_text(" ".join(cmd[1:]) + "\n" + out.stdout)
    if out.returncode != 0:
        raise RuntimeError(f"{row} run {i} exited {out.returncode}:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.split("result: ", 1)[1].splitlines()[0])
    return {
        **_summary(out.stdout),
        "up_bytes": 0.0,
        "down_bytes": 0.0,
        "rounds": 0,
        "wall_s": wall,
        "train_s": result["train_s"],
        "central_steps": steps,
    }


def run_package_rules(args) -> dict:
    """The second task's rules on each run's held-out pairs (each seed holds out its own); F1 = exact match, as
    a rule's answer is a whole label."""
    from geofed_apps.finetune.package_task import package_pairs, rule_scores, split_pairs

    pairs = package_pairs()
    splits = [split_pairs(pairs, i) for i in range(args.runs)]
    per_seed = [rule_scores(train, held) for train, held in splits]
    rules = {
        name: {"em": statistics.median(s[name] for s in per_seed), "f1": statistics.median(s[name] for s in per_seed),
               "per_seed": [s[name] for s in per_seed]}
        for name in per_seed[0]
    }
    train, held = splits[0]
    return {"rules": rules, "train_pairs": len(train), "eval_pairs": len(held), "seeds": list(range(args.runs))}


def run_rules(args) -> dict:
    if args.task != "docstring-params":
        return run_package_rules(args)
    from geofed_apps.finetune.rules import rule_scores
    from geofed_apps.finetune.task import stdlib_qa_split

    split = stdlib_qa_split(args.clients, renamings=args.renamings)  # the rules learn from what the models do
    train = [p for c in split.clients for p in c]
    scores = rule_scores(train, split.eval)
    own = [rule_scores(train, pairs) for pairs in split.own_eval]  # each client's own held-out pairs
    return {
        "rules": {
            name: {"em": em, "f1": f1, "own_f1": statistics.mean(o[name][1] for o in own)}
            for name, (em, f1) in scores.items()
        },
        "train_pairs": len(train),
        "eval_pairs": len(split.eval),
        "own_eval_pairs": [len(pairs) for pairs in split.own_eval],
    }


def _optional(result: dict, key: str, index: int | None = None) -> str:
    """A score only some results record (`own_f1`, `closed_set`), its `index`-th value, or — without it."""
    if key not in result:
        return "—"
    value = result[key] if index is None else result[key][index]
    return f"{value:.1f}"


def _optional_cell(runs: list[dict], key: str) -> str:
    """The median (range) of a score only some results record, or — unless every run has it."""
    return _cell([r[key][1] for r in runs], ".1f") if all(key in r for r in runs) else "—"


def _rule_runs(rule: dict) -> str:
    """How a rule's score was had: once (one held-out set) or the median over each seed's held-out set."""
    seeds = rule.get("per_seed")
    if not seeds:
        return "1 (deterministic)"
    return f"median of {len(seeds)} seeds' held-out sets ({min(seeds):.1f}–{max(seeds):.1f})"


def _cell(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}–{format(max(values), fmt)})"


def report() -> str:
    """The markdown table from bench/results/finetune/*.json."""
    lines = [
        "| row | trainable params | exchanged params | up B/round/client | down B/round/client "
        "| socket up B/round/client | socket down B/round/client | exact match "
        "| F1 | eval loss | own-domain F1 | closed-set accuracy | train s | load (1 min) | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rule_path = OUT / "rule.json"
    if rule_path.is_file():
        rules = json.loads(rule_path.read_text())["rules"]
        best = max(rules, key=lambda name: rules[name]["f1"])
        lines.append(
            f"| trivial rule ({best}) | — | — | — | — | — | — | {rules[best]['em']:.1f} | {rules[best]['f1']:.1f} "
            f"| — | {_optional(rules[best], 'own_f1')} | — | — | — | {_rule_runs(rules[best])} |"
        )
    base = next((json.loads(p.read_text()) for p in sorted(OUT.glob("*-[0-9]*.json"))), None)
    if base is not None:
        lines.append(
            f"| base model (before) | — | — | — | — | — | — | {base['em'][0]:.1f} | {base['f1'][0]:.1f} "
            f"| {base['eval_loss'][0]:.2f} | {_optional(base, 'own_f1', 0)} | {_optional(base, 'closed_set', 0)} "
            "| — | — | — |"
        )
    for row in ROWS:
        runs = [json.loads(p.read_text()) for p in sorted(OUT.glob(f"{row}-[0-9]*.json"))]
        if not runs:
            continue
        em, f1 = [r["em"][1] for r in runs], [r["f1"][1] for r in runs]
        loss = [r["eval_loss"][1] for r in runs]
        fed = runs[0]["rounds"] > 0
        traffic = [
            _cell([r[key] for r in runs], ".0f") if fed and all(key in r for r in runs) else "—"
            for key in ("up_bytes", "down_bytes", "socket_up_bytes", "socket_down_bytes")
        ]
        load = ", ".join(f"{r['load_1min']:.1f}" for r in runs)
        lines.append(
            f"| {row} | {runs[0]['trainable']:,} | {runs[0]['exchanged']:,} | {' | '.join(traffic)} "
            f"| {_cell(em, '.1f')} | {_cell(f1, '.1f')} | {_cell(loss, '.2f')} "
            f"| {_optional_cell(runs, 'own_f1')} | {_optional_cell(runs, 'closed_set')} "
            f"| {_cell([r['train_s'] for r in runs], '.0f')} | {load} | {len(runs)} |"
        )
    every = [json.loads(p.read_text()) for p in sorted(OUT.glob("*-[0-9]*.json"))]
    if every:
        hashes = sorted({r["base_sha256"] for r in every if "base_sha256" in r})
        commits = sorted({r["algorithms_commit"] for r in every})
        lines += ["", f"Base model sha256: {', '.join(hashes)}. Paradigm algorithms at commit {', '.join(commits)}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--first-run", type=int, default=0,
                        help="start at this run (seed); with --runs, one process per seed can share an --out")
    parser.add_argument("--steps", type=int, default=300, help="local steps per client (training.max_steps)")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=900.0, help="upper bound on one federated run")
    parser.add_argument("--rows", default=",".join(["rule", *ROWS]), help="comma-separated rows to run")
    parser.add_argument("--report", action="store_true", help="only print the table from saved results")
    parser.add_argument("--again", action="store_true", help="re-measure runs that have saved results")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results/finetune)")
    parser.add_argument("--renamings", type=int, default=0, help="renamed copies of each training pair, every row")
    parser.add_argument("--task", default="docstring-params", choices=("docstring-params", "stdlib-package"),
                        help="the task of every row (`geofed local --task`); keep each task's results in its own "
                        "--out")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting every row trains with (`geofed local --set`), after the row's own")
    args = parser.parse_args(argv)
    if args.task != "docstring-params" and (args.renamings or not args.out):
        parser.error(f"--task {args.task} brings its own pairs (no --renamings) and needs its own --out")
    global OUT
    OUT = args.out or OUT
    if not args.report:
        OUT.mkdir(parents=True, exist_ok=True)
        for row in args.rows.split(","):  # row by row: a cut-short benchmark leaves whole rows
            if row == "rule":
                (OUT / "rule.json").write_text(json.dumps(run_rules(args), indent=1))
                continue
            for i in range(args.first_run, args.runs):
                if (OUT / f"{row}-{i}.json").exists() and not args.again:
                    continue  # measured already (a resumed benchmark)
                kind, paradigm, overrides = ROWS[row]
                load = os.getloadavg()[0]
                result = (
                    run_central(row, kind, paradigm, i, args)
                    if kind.startswith("central")
                    else run_fed(row, kind, paradigm, overrides, i, args)
                )
                trainable, exchanged = _trainable(paradigm, overrides)
                result.update(
                    trainable=trainable,
                    exchanged=exchanged if kind.startswith("fed") else 0,
                    steps_per_client=args.steps,
                    clients=args.clients,
                    seed=i,
                    load_1min=load,
                    algorithms_commit=_commit(ALGORITHMS),
                    commit=_commit(),
                )
                (OUT / f"{row}-{i}.json").write_text(json.dumps(result, indent=1))
                print(
                    f"{row} run {i}: F1 {result['f1'][1]:.1f}, EM {result['em'][1]:.1f}, "
                    f"{result['wall_s']:.0f}s, load {load:.1f}",
                    flush=True,
                )
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
