"""Per-rank peak host memory of one client round, today's gather path against the slice-wise path (issue 18).

    .venv/bin/python -m bench.client_shards_bench --runs 3 --ranks 1 2 4

Each configuration is one `torchrun` launch of N gloo ranks on this CPU machine running one round of a
site's sync: adopt the global model rank 0 received, one AdamW step (a synthetic gradient stands in for
local training), δ = θ_local − θ_base with error feedback, int8+Huffman encoding, the frames spooled to
a file as `PSClient.prepare` does, and the client checkpoint.
  gather: the gather path: model built as a CPU shell and sharded, the global model broadcast parameter by
          parameter, the model gathered on rank 0 (`full_flat_on_rank0`), delta, residual and encoding
          there, AdamW's state gathered to rank 0 and `latest.pt` written by rank 0.
  shard:  the agent's `SliceSync`: the model built on the meta device and sharded, each rank receiving
          its slice of the global model, computing its slice of δ and its own residual, encoding it at its
          flat offsets (rank 0 relays the frames), and a sharded DCP checkpoint.
Every rank reports its RSS high-water mark (`ru_maxrss`) and its RSS after imports. The model is a
GPT-2 built from a config (no weights are downloaded); values are synthetic. Raw output per run goes to
bench/results/client-shards/, the table to docs/benchmarks.md (section `client-shards`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "client-shards"
DOCS = ROOT / "docs" / "benchmarks.md"
PATHS = ("gather", "shard")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _build(path: str, n_embd: int, n_layer: int, world: int):
    """The GPT-2 of this size, as the path builds it: on the meta device and sharded (slice-wise), or whole."""
    from client_agent.training.fsdp import build_on_meta, materialise, shard_model
    from client_agent.training.model import build_model_shell
    from geofed.config import ModelConfig

    cfg = ModelConfig(family="gpt2", n_embd=n_embd, n_layer=n_layer, n_head=16 if n_embd % 16 == 0 else 12,
                      vocab_size=50257, block_size=1024)
    model = build_on_meta(cfg) if path == "shard" else build_model_shell(cfg)
    if world > 1:
        shard_model(model)
    elif path == "shard":
        materialise(model)  # one rank owns everything: its slice is the whole model
    return model


def _adopt(model, glob, slices, world: int) -> None:
    """The global model (rank 0's `glob`) into every rank's parameters, as the path does it."""
    if slices is not None:
        slices.adopt(model, glob.numpy() if glob is not None else None)
    elif world > 1:
        from client_agent.training.fsdp import broadcast_flat_from_rank0

        broadcast_flat_from_rank0(model, glob)
    else:
        from client_agent.training.flat import load_flat_

        load_flat_(model, glob)


def _stepped_adamw(model):
    """AdamW after one step on a synthetic gradient: its full state, without training."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _push(spool_path: Path, model, glob, slices, rank: int, world: int, numel: int):
    """Encode the round's delta into a spool file as the path does; (delta, residual) on the gather path's
    rank 0, else (None, None)."""
    import torch

    from client_agent.training.fsdp import full_flat_on_rank0
    from geofed.codec import ErrorFeedback, make_codec

    codec = make_codec("int8", "huffman", 0)
    delta = ef = None
    with open(spool_path, "wb") as spool:
        def write(header: bytes, frames) -> None:
            spool.write(header)
            for frame in frames:
                spool.write(frame)

        if slices is not None:
            slices.encode(codec, slices.delta(model), write if rank == 0 else None)
            slices.settle(True)
        else:
            full = full_flat_on_rank0(model) if world > 1 else torch.cat([p.detach().reshape(-1) for p in
                                                                         model.parameters()])
            if rank == 0:
                delta = full.sub_(glob)
                ef = ErrorFeedback(numel)
                write(*ef.encode(codec, delta.numpy()))
                ef.commit()
    return delta, ef


def _checkpoint(ckpt: Path, model, optimizer, slices, rank: int, glob, delta, ef) -> None:
    """Checkpoint as the path does: every rank its slice (DCP), or rank 0 the whole vector."""
    from client_agent.training.checkpoint import ClientCheckpoint, save_checkpoint
    from client_agent.training.fsdp import full_optimizer_state

    if slices is not None:
        slices.directory = ckpt
        slices.save(1, model, optimizer, {"step": 1}, None)
        return
    state = full_optimizer_state(model, optimizer)
    if rank == 0:
        model_flat = delta + glob  # paradigm.checkpoint_flat: base + δ
        save_checkpoint(ckpt / "latest.pt", ClientCheckpoint(
            model=model_flat, optimizer=state, step=1, data_position={}, base_version=1,
            residual=ef.state_dict()))


def worker(path: str, n_embd: int, n_layer: int, out: Path) -> None:
    """One rank of one round (run under torchrun)."""
    import torch

    from client_agent.training.fsdp import init_distributed
    from client_agent.training.slices.state import SliceSync

    rank, world = init_distributed()
    torch.set_num_threads(1)
    baseline = rss_mib()
    times: dict[str, float] = {}
    t = time.monotonic()

    def lap(name: str) -> None:
        nonlocal t
        times[name] = round(time.monotonic() - t, 2)
        t = time.monotonic()

    model = _build(path, n_embd, n_layer, world)
    numel = sum(p.numel() for p in model.parameters())
    lap("build")
    # The global model as the PS streamed it: on rank 0 only, in both paths (it has the one connection).
    glob = torch.empty(numel).normal_(0, 0.02) if rank == 0 else None
    # The slice-wise path is the client agent's own (`SliceSync`, what `geofed client` runs on a multi-rank site).
    slices = SliceSync(Path(tempfile.mkdtemp()), rank, world, numel, None) if path == "shard" else None
    _adopt(model, glob, slices, world)
    lap("adopt")
    optimizer = _stepped_adamw(model)
    lap("step")
    with tempfile.TemporaryDirectory() as tmp:
        delta, ef = _push(Path(tmp) / "upload", model, glob, slices, rank, world, numel)
        lap("push")
        before_checkpoint = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        _checkpoint(Path(tmp) / "ckpt", model, optimizer, slices, rank, glob, delta, ef)
        lap("checkpoint")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.with_name(f"{out.stem}.rank{rank}.json").write_text(json.dumps({
        "path": path, "world": world, "rank": rank, "numel": numel, "peak_rss_mib": round(peak, 1),
        "peak_before_checkpoint_mib": round(before_checkpoint, 1), "baseline_rss_mib": round(baseline, 1),
        "seconds": times, "loadavg": os.getloadavg(),
    }))
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def launch(path: str, world: int, run: int, n_embd: int, n_layer: int) -> list[dict]:
    name = f"{path}-r{world}-run{run}"
    out = RESULTS / f"{name}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world),
           str(Path(__file__)), "--worker", path, "--n-embd", str(n_embd), "--n-layer", str(n_layer),
           "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    load = os.getloadavg()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    (RESULTS / f"{name}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed (exit {proc.returncode}); see {RESULTS / (name + '.log')}")
    ranks = [json.loads((RESULTS / f"{name}.rank{r}.json").read_text()) for r in range(world)]
    for r in ranks:
        r["loadavg_at_start"] = load
    (RESULTS / f"{name}.rank0.json").write_text(json.dumps(ranks[0]))  # with the load at launch
    return ranks


def table(rows: dict[tuple[str, int], list[list[dict]]], cmd: str) -> str:
    """Markdown: per configuration, rank 0's and the largest other rank's peak RSS (median and range of runs)."""
    numel = next(iter(rows.values()))[0][0]["numel"]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values) / 1024:.2f} ({min(values) / 1024:.2f}–{max(values) / 1024:.2f})"

    lines = [
        f"Command: `{cmd}` · GPT-2 built from a config, {numel / 1e6:.0f}M parameters, synthetic values, "
        "int8+Huffman with error feedback, gloo ranks on this 2-core CPU machine (no GPU). Peak RSS in GiB "
        "(`ru_maxrss`), median (min–max) over runs; the RSS after imports is included in every figure. In both "
        "paths rank 0 also holds the global model as the PS streamed it (one fp32 copy, as `PSClient` does); "
        "AdamW's state is real (one step on a synthetic gradient), training itself is not run. The slice-wise "
        "rows run the client agent's own `SliceSync` (`client_agent/training/slices/state.py`: adopt, delta, "
        "encode and relay, settle, sharded checkpoint), the path `geofed client` takes on a multi-rank site; "
        "the gather rows run the calls the agent makes on its gather path (one rank, a sharded PS, or the "
        "paradigms and codecs `client_agent/sync/route.py` keeps there)."
        + (" Scaled down from the issue's few hundred million parameters: estimated from this table's bytes per "
           "parameter (not run), the 4-rank gather run of a 350M model would peak near 17 GiB summed over its ranks, "
           "too close to this shared 24 GiB machine's limit." if numel < 2e8 else ""),
        "",
        "| path | ranks | runs | rank 0 peak GiB | other ranks' peak GiB (largest) "
        "| rank 0 over baseline, bytes/param | rank 0 peak before the checkpoint GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    prose = []
    for (path, world), runs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        leader = [r[0]["peak_rss_mib"] for r in runs]
        others = [max(x["peak_rss_mib"] for x in r[1:]) for r in runs] if world > 1 else []
        over = statistics.median(r[0]["peak_rss_mib"] - r[0]["baseline_rss_mib"] for r in runs) * 2**20 / numel
        before = [r[0]["peak_before_checkpoint_mib"] for r in runs]
        lines.append(f"| {path} | {world} | {len(runs)} | {cell(leader)} | {cell(others) if others else '–'} | "
                     f"{over:.1f} | {cell(before)} |")
    for world in sorted({w for _, w in rows}):
        if ("gather", world) in rows and ("shard", world) in rows:
            g = statistics.median(r[0]["peak_rss_mib"] for r in rows[("gather", world)])
            s = statistics.median(r[0]["peak_rss_mib"] for r in rows[("shard", world)])
            prose.append(f"{world} rank{'s' if world > 1 else ''}: rank 0 peaks at {s / 1024:.2f} GiB slice-wise "
                         f"against {g / 1024:.2f} GiB on the gather path ({s / g:.2f}×).")
    loads = [r[0]["loadavg_at_start"][0] for runs in rows.values() for r in runs]
    prose.append(f"Machine load (1-min load average at each launch): {min(loads):.1f}–{max(loads):.1f}, "
                 "shared with other engineers' work; memory figures do not depend on it, the seconds in the raw "
                 "files do.")
    return "\n".join(lines) + "\n\n" + " ".join(prose) + "\n\nRaw output: `bench/results/client-shards/`.\n"


def read_raw() -> dict[tuple[str, int], list[list[dict]]]:
    """Every run's per-rank files under RESULTS, grouped by (path, ranks)."""
    rows: dict[tuple[str, int], list[list[dict]]] = {}
    for first in sorted(RESULTS.glob("*-run*.rank0.json")):
        stem = first.name.removesuffix(".rank0.json")
        ranks = [json.loads(p.read_text()) for p in sorted(RESULTS.glob(f"{stem}.rank*.json"),
                                                             key=lambda p: int(p.suffixes[-2][5:]))]
        load = json.loads(first.read_text()).get("loadavg_at_start") or ranks[0]["loadavg"]
        for r in ranks:
            r.setdefault("loadavg_at_start", load)
        rows.setdefault((ranks[0]["path"], ranks[0]["world"]), []).append(ranks)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=PATHS)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--report", action="store_true", help="rebuild the table from the raw files, run nothing")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.n_embd, args.n_layer, args.out)
        sys.stdout.flush()
        os._exit(0)  # gloo's threads can abort in static destructors at exit, after all work is done
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows: dict[tuple[str, int], list[list[dict]]] = {}
    if args.report:
        rows = read_raw()
        cmd = (RESULTS / "command.txt").read_text().strip()
    else:
        cmd = " ".join(["python -m bench.client_shards_bench", *sys.argv[1:]])
        (RESULTS / "command.txt").write_text(cmd + "\n")
    for run in range(0 if args.report else args.runs):
        for world in args.ranks:
            for path in args.paths:
                ranks = launch(path, world, run, args.n_embd, args.n_layer)
                rows.setdefault((path, world), []).append(ranks)
                print(json.dumps({"path": path, "world": world, "run": run,
                                  "peak_rss_mib": [r["peak_rss_mib"] for r in ranks],
                                  "seconds": ranks[0]["seconds"], "load": ranks[0]["loadavg_at_start"]}), flush=True)
    body = table(rows, cmd)
    (RESULTS / "table.md").write_text(body)
    print(body)
    if not args.no_docs:
        from bench.bench_markers import replace_section

        replace_section(DOCS, "client-shards", "### Client memory per rank, gather vs slice-wise (issue 18)\n\n"
                        + body)


if __name__ == "__main__":
    main()
