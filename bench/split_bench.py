"""Split learning (FSL-SAGE) against full-model federated training on the same task, through `geofed local`.

python bench/split_bench.py                           # 3 runs each, 2 clients, 40 s (~8 min on 2 cores)
python bench/split_bench.py --report-only --write docs/benchmarks.md

Both methods train `geofed local`'s default model (gpt2 2×128, byte vocabulary) on the same stdlib split
for the same wall-clock time; fsl-sage cuts it after block 1 (the client keeps embeddings, block 0, the
final norm and head, plus a 32-wide auxiliary block; a trainer process holds block 1). Reported per
method: the held-out loss of the whole global model at the end, what a client's training keeps in memory
(parameters, gradients and AdamW state, measured on the live tensors after a step; activations are not
counted), and the bytes a client moves per round (its pushes and model downloads, as the PS counts them,
plus, for fsl-sage, its activation exchanges with the trainer, as the client logs them).
Raw per-run outputs go to bench/results/split/.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))

METHODS = {"pretrain": [], "fsl-sage": ["--paradigm", "fsl-sage"]}


def training_state(method: str, model_settings: dict) -> int:
    """Bytes of parameters + gradients + AdamW state of a client's model after one step, measured."""
    import torch

    from client_agent.split.parts import client_model, training_state_bytes
    from client_agent.training.model import build_model, lm_loss
    from geofed.config import ModelConfig

    cfg = ModelConfig(**model_settings)
    model = build_model(cfg)
    if method == "fsl-sage":
        model = client_model(model, 1, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lm_loss(model, torch.randint(0, 257, (2, 33))).backward()
    opt.step()
    return training_state_bytes(model, opt)


def run_once(method: str, run: int, work: Path, duration: float, clients: int) -> dict:
    cmd = [sys.executable, "-m", "geofed_apps", "local", "--clients", str(clients), "--duration", str(duration),
           "--run-dir", str(work), "--quiet", *METHODS[method]]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    text = out.stdout
    loss = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", text, re.M)
    traffic = re.search(r"^pushed ([0-9.]+) MB, pulled ([0-9.]+) MB$", text, re.M)
    run_dir = Path(re.search(r"^run directory: (.+)$", text, re.M).group(1))
    logs = "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("client-*.log")))
    rounds = len(re.findall(r"event=sync ", logs))
    pattern = r"event=split_aligned .*bytes_sent=(\d+) bytes_received=(\d+)"
    split = [tuple(map(int, m)) for m in re.findall(pattern, logs)]
    split_bytes = sum(a + b for a, b in split)
    return {
        "method": method, "run": run, "returncode": out.returncode, "duration_s": duration, "clients": clients,
        "eval_initial": float(loss.group(1)), "eval_final": float(loss.group(2)),
        "pushed_mb": float(traffic.group(1)), "pulled_mb": float(traffic.group(2)), "client_rounds": rounds,
        "split_exchanges": len(split), "split_mb": split_bytes / 1e6,
        "mb_per_round": (float(traffic.group(1)) + float(traffic.group(2)) + split_bytes / 1e6) / max(1, rounds),
        "memory_line": next((ln for ln in text.splitlines() if ln.startswith("client peak memory")), ""),
        "stdout_tail": text[-1500:],
        "model": yaml.safe_load((run_dir / "federation.yaml").read_text())["model"],
    }


def section(rows: dict[str, list[dict]], state: dict[str, int]) -> str:
    def cell(rs, key, fmt="{:.2f}"):
        vals = [r[key] for r in rs]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        return f"{fmt.format(statistics.mean(vals))} ± {fmt.format(sd)}"

    lines = [
        "## Split learning (FSL-SAGE) against full-model federated training",
        "",
        "Command: `python bench/split_bench.py --write docs/benchmarks.md` (raw per-run outputs in "
        "`bench/results/split/`). `geofed local` with 2 clients for 40 s on this 2-core machine, the default "
        "model (gpt2 2×128, 0.45 M parameters, byte vocabulary) and data split; fsl-sage cuts after block 1 "
        "(client: embeddings, block 0, final norm, tied head, 32-wide auxiliary block; trainer process: "
        "block 1), one exchange of 2 activation batches with the trainer per round, int16. Memory: parameters, "
        "gradients and AdamW state of a client's model measured on live tensors after one step (activations "
        "not counted). Bytes per round: a client's pushes and model downloads as the PS counts them, plus "
        "its activation exchanges with the trainer.",
        "",
        "| method | runs | final eval loss (whole model) | client training state (MB) | MB per client round "
        "| client rounds in 40 s | trainer exchanges |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, rs in rows.items():
        lines.append(f"| {method} | {len(rs)} | {cell(rs, 'eval_final')} | {state[method] / 1e6:.2f} | "
                     f"{cell(rs, 'mb_per_round', '{:.3f}')} | {cell(rs, 'client_rounds', '{:.1f}')} | "
                     f"{cell(rs, 'split_exchanges', '{:.1f}')} |")
    if {"pretrain", "fsl-sage"} <= set(rows):
        p = statistics.mean(r["eval_final"] for r in rows["pretrain"])
        f = statistics.mean(r["eval_final"] for r in rows["fsl-sage"])
        bp = statistics.mean(r["mb_per_round"] for r in rows["pretrain"])
        bf = statistics.mean(r["mb_per_round"] for r in rows["fsl-sage"])
        lines += ["", f"Reading: a split client holds {state['fsl-sage'] / state['pretrain']:.0%} of the full "
                  "model's training state: one of the two blocks moved to the trainer (the embeddings and the tied "
                  "head, which stay on the client, are a large share of this tiny model); each block moved takes "
                  "its parameters, gradients and moments off every client, so the saving grows with depth. Per "
                  f"round a split client moves {bf:.2f} MB against {bp:.2f} MB: its delta and downloads are "
                  "smaller by one block, and the activation exchange (2 batches of 8×128×128 int16 activations "
                  "and their gradients) adds more than that back. The whole split model ends "
                  f"at {f:.2f} against {p:.2f} for full-model training in the same 40 s; the difference is within "
                  "the run-to-run spread at 3 runs (a split client does less compute per step, one block instead "
                  "of two, while the server block learns only from the few batches sent per round)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=40.0)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "split")
    ap.add_argument("--work", type=Path, default=Path("/tmp/geofed-split-bench"))
    ap.add_argument("--write", type=Path)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict]] = {}
    if args.report_only:
        for method in METHODS:
            rows[method] = [json.loads(p.read_text()) for p in sorted(args.out.glob(f"{method}-run*.json"))]
    else:
        for run in range(args.runs):
            for method in METHODS:
                result = run_once(method, run, args.work, args.duration, args.clients)
                (args.out / f"{method}-run{run}.json").write_text(json.dumps(result, indent=1))
                rows.setdefault(method, []).append(result)
                print(f"{method} run {run}: loss {result['eval_initial']:.2f} -> {result['eval_final']:.2f}, "
                      f"{result['mb_per_round']:.3f} MB/round, {result['client_rounds']} rounds, "
                      f"{result['memory_line']}", flush=True)
    state = {m: training_state(m, rows[m][0]["model"]) for m in rows}
    text = section(rows, state)
    print(text)
    if args.write:
        from bench.bench_markers import replace_section

        replace_section(args.write, "split", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
