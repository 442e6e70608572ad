"""The utility cost of site-level differential privacy: final global eval loss against ε.

python -m bench.privacy_bench [--runs 3] [--duration 60] [--tasks local3,lora]
python -m bench.privacy_bench --report          # only rebuild the table from bench/results/privacy/

Each run is one `geofed local` (3 client processes and a PS on loopback: the local3 scenario's federation, or
`--paradigm lora` fine-tuning the cached base model on the signature QA task) with the settings of one row:
sync rounds of all three sites with uniform weights (central DP averages n clipped updates; the same
settings without privacy are the reference row), and privacy rows with one noise multiplier σ each.
Repeats change model.seed (and draw fresh noise). Raw output per run under
bench/results/privacy/<task>/<row>.r<N>/ (stdout.txt, metrics.jsonl, load.txt with `uptime` before and
after); the table goes to docs/privacy.md between the `privacy` markers and to bench/results/privacy/table.md.
A run whose directory holds a finished stdout.txt is not run again.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_markers import replace_section  # noqa: E402

OUT = BENCH / "results" / "privacy"
DOCS = ROOT / "docs" / "privacy.md"
GEOFED = str(Path(sys.executable).with_name("geofed"))

COMMON = ["aggregation.mode=sync", "aggregation.quorum=1.0", "aggregation.weighting=uniform"]
TASKS: dict[str, dict] = {
    # clip_norm C: below the largest site update norm of a first run (the PS warns when C exceeds every update)
    "local3": {"args": [], "sets": [*COMMON, "training.local_steps=5"], "clip": 2.0},
    "lora": {"args": ["--paradigm", "lora"], "sets": [*COMMON, "training.local_steps=10"], "clip": 2.0},
}
SIGMAS = (0.0, 1.0, 4.0)  # 0: the reference row, privacy off


def row_name(sigma: float) -> str:
    return "no-privacy" if sigma == 0 else f"sigma-{sigma:g}"


def run_one(task: str, sigma: float, repeat: int, duration: float) -> Path:
    out = OUT / task / f"{row_name(sigma)}.r{repeat}"
    if (out / "stdout.txt").is_file() and "run directory:" in (out / "stdout.txt").read_text():
        return out
    out.mkdir(parents=True, exist_ok=True)
    spec = TASKS[task]
    sets = [*spec["sets"], f"model.seed={repeat}"]
    if sigma:
        sets += ["privacy.enabled=true", f"privacy.noise_multiplier={sigma:g}", f"privacy.clip_norm={spec['clip']:g}"]
    cmd = [GEOFED, "local", "--quiet", "--duration", f"{duration:g}", "--run-dir", str(OUT / "runs"), *spec["args"]]
    for s in sets:
        cmd += ["--set", s]
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=duration + 1200)
    except subprocess.TimeoutExpired as exc:  # recorded, not retried: the table counts finished runs only
        (out / "timeout.txt").write_text(f"command: {' '.join(cmd)}\nbefore: {load_before}\n{exc}\n")
        return out
    wall = time.monotonic() - t0
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    (out / "stdout.txt").write_text(proc.stdout + proc.stderr)
    (out / "load.txt").write_text(
        f"command: {' '.join(cmd)}\nbefore: {load_before}\nafter: {load_after}\n"
        f"wall_s: {wall:.1f}\nreturncode: {proc.returncode}\n"
    )
    match = re.search(r"run directory: (\S+)", proc.stdout)
    if match:
        run = Path(match.group(1))
        if (run / "metrics.jsonl").is_file():
            shutil.copy(run / "metrics.jsonl", out / "metrics.jsonl")
        shutil.rmtree(run, ignore_errors=True)  # the model and logs: large, and not read by the table
    return out


def read_run(out: Path) -> dict:
    """Final global eval loss, ε and (fine-tuning) the answers' eval loss and F1 of one run directory under OUT."""
    text = (out / "stdout.txt").read_text()
    records = (
        [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        if (out / "metrics.jsonl").is_file()
        else []
    )
    evals = [r for r in records if r.get("event") == "global_eval"]
    privacy = [r for r in records if r.get("event") == "privacy"]
    em = re.findall(r"exact match: [\d.]+ -> ([\d.]+)", text)
    f1 = re.findall(r"^F1: [\d.]+ -> ([\d.]+)$", text, re.M)
    answers = re.findall(r"^eval loss: [\d.]+ -> ([\d.]+)$", text, re.M) if f1 else []
    load = re.search(r"before: .*load average: ([\d.]+)", (out / "load.txt").read_text())
    return {
        "loss": evals[-1]["eval_loss"] if evals else None,
        "version": evals[-1]["version"] if evals else None,
        "evals": [(r["version"], r["eval_loss"]) for r in evals],
        "epsilon": privacy[-1]["epsilon"] if privacy else None,
        "em": float(em[-1]) if em else None,
        "f1": float(f1[-1]) if f1 else None,
        "answers_loss": float(answers[-1]) if answers else None,
        "load": float(load.group(1)) if load else None,
    }


def _median_range(xs: list[float | None], spec: str) -> str:
    got = [x for x in xs if x is not None]
    if not got:
        return "—"
    med = format(statistics.median(got), spec)
    return f"{med} ({format(min(got), spec)}–{format(max(got), spec)})" if len(got) > 1 else med


def _answers(losses: list[float | None], f1s: list[float | None]) -> str:
    """The fine-tuning task's answers: final eval loss and F1 (medians, ranges); — for pretraining."""
    if all(x is None for x in f1s):
        return "—"
    return f"{_median_range(losses, '.2f')}, F1 {_median_range(f1s, '.1f')}"


def _loss_by(evals: list[tuple[int, float]], version: int) -> float | None:
    """The eval loss of the last evaluation at or before `version` (evaluations run every 10 s, not per version)."""
    at = [loss for v, loss in evals if v <= version]
    return at[-1] if at else None


def _saved_sigmas(task: str) -> list[float]:
    """σ of every row with saved runs for `task` (the default rows and any run with --sigmas), ascending."""
    found = {0.0 if d.name.startswith("no-privacy.") else float(d.name.split(".r")[0].removeprefix("sigma-"))
             for d in (OUT / task).glob("*.r*") if d.is_dir()}
    return sorted(found)


def report() -> str:
    lines = [
        "| task | row | σ | ε at δ 1e-5 (median) | final eval loss, median (range) | versions | eval loss by the "
        "task's common version | answers' eval loss, F1 (fine-tuning) | runs | load (1-min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        rows = {}
        for sigma in _saved_sigmas(task):
            runs = sorted((OUT / task).glob(f"{row_name(sigma)}.r*"))
            rows[sigma] = [read_run(r) for r in runs if (r / "stdout.txt").is_file()]
        finals = [g["version"] for got in rows.values() for g in got if g["version"] is not None]
        common = min(finals) if finals else 0  # the fewest versions any run of the task published
        for sigma, got in rows.items():
            if not got:
                continue
            eps = [g["epsilon"] for g in got if g["epsilon"] is not None]
            eps_text = "∞ (no privacy)" if not sigma else (f"{statistics.median(eps):.3g}" if eps else "—")
            lines.append(
                f"| {task} | {row_name(sigma)} | {sigma:g} | {eps_text} | "
                f"{_median_range([g['loss'] for g in got], '.3f')} | "
                f"{_median_range([g['version'] for g in got], '.0f')} | "
                f"v{common}: {_median_range([_loss_by(g['evals'], common) for g in got], '.3f')} | "
                f"{_answers([g['answers_loss'] for g in got], [g['f1'] for g in got])} | {len(got)} | "
                f"{_median_range([g['load'] for g in got], '.1f')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of training per run")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--sigmas", default=",".join(f"{s:g}" for s in SIGMAS))
    parser.add_argument("--report", action="store_true", help="only rebuild the table")
    args = parser.parse_args(argv)
    if not args.report:
        for repeat in range(args.runs):  # interleaved: a cut-short session still has every row
            for task in args.tasks.split(","):
                for sigma in (float(s) for s in args.sigmas.split(",")):
                    print(
                        f"{task} {row_name(sigma)} r{repeat}: {run_one(task, sigma, repeat, args.duration)}", flush=True
                    )
    table = report()
    (OUT / "table.md").write_text(table + "\n")
    replace_section(DOCS, "privacy", table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
