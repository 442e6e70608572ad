"""The one-machine references: one process trains on every client's data, no WAN, no PS.

Same model, initialisation, inner optimizer (the agent's `LocalTrainer`) and held-out evaluator as the
federated clients; it runs until it has seen as many tokens as the most productive federated method, so
each method's final loss can be read against it at equal tokens (`references.py`). By default the batch
and learning rate are one client's (reference (a)); `--batch-size` and `--lr` set the global batch and a
sweep point's rate (reference (b)), and `--per-client` draws each step's batch as one equal share from each
client's own shard, what synchronous data-parallel replicas average each step (reference (c)). Run as a
subprocess, one thread, like a client.

The inner learning rate follows the federation settings' schedule. With `training.lr_progress` run_time
(the federated clients decay over the fraction of the run's time budget spent) the run's progress here
is the fraction of the token budget trained: this run is budgeted in tokens, not seconds, and each
reaches the schedule's floor at the end of its own budget. The warm-up counts this process's steps, as a
client's counts its own.

    python -m bench.federation.single --federation F.yaml --data a.list b.list --eval-list e.list \\
        --tokens 2000000 --evals 40 --out curve.jsonl --work DIR [--batch-size 48 --lr 0.004 --per-client]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from geofed_apps.launch import child_env

from .launch import DataSplit, RunError
from .results import CurvePoint, RunResult
from .scenario import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]  # the working directory that makes `bench` importable


class PerClientStream:
    """Each batch is an equal share of rows from each client's own stream, concatenated: the global batch
    that M synchronous data-parallel replicas, one per site, average each step (reference (c))."""

    def __init__(self, shards: list) -> None:
        self.shards = shards
        self.block_size = shards[0].block_size

    def next_batch(self, batch_size: int, rank: int = 0, world: int = 1):
        """`batch_size` rows, split as evenly as the shards allow (the first ones take the remainder)."""
        import torch

        n = len(self.shards)
        if batch_size < n or rank != 0 or world != 1:
            raise ValueError(f"a per-client batch needs >= {n} rows and one rank, got {batch_size} on {world}")
        sizes = [batch_size // n + (i < batch_size % n) for i in range(n)]
        return torch.cat([s.next_batch(k) for s, k in zip(self.shards, sizes, strict=True)])

    def state_dict(self) -> dict:
        return {"shards": [s.state_dict() for s in self.shards]}


def train_single(
    fed_file: Path,
    lists: list[Path],
    eval_files: list[Path],
    token_budget: int,
    evals: int,
    out: Path,
    work: Path,
    *,
    batch_size: int | None = None,
    lr: float | None = None,
    per_client: bool = False,
    seed: int = 0,
) -> None:
    """Train on `lists` for `token_budget` tokens, appending (t, step, loss, tokens) to `out`.

    `batch_size` and `lr` replace the federation's training settings; `per_client` draws each batch as
    an equal share from each list's own shard instead of from their union; `seed` orders the batches (the
    model's initialisation stays the federation's).
    """
    import torch
    import yaml

    from client_agent.data.corpus import read_file_list
    from client_agent.data.files import load_tokens
    from client_agent.data.streams import TokenStream
    from client_agent.data.tokenizer import load_tokenizer
    from client_agent.training.flat import flatten
    from client_agent.training.model import build_model
    from client_agent.training.trainer import LocalTrainer
    from geofed.config import FederationConfig
    from geofed_apps.evaluate import GlobalEvaluator

    torch.set_num_threads(1)
    fed = FederationConfig.model_validate(yaml.safe_load(fed_file.read_text(encoding="utf-8")))
    overrides = {k: v for k, v in (("batch_size", batch_size), ("lr", lr)) if v is not None}
    if overrides:
        fed = fed.model_copy(update={"training": fed.training.model_copy(update=overrides)})
    tokenizer = load_tokenizer(None)
    if per_client:
        shards = [
            TokenStream(load_tokens(read_file_list(lst), tokenizer, cache=work / f"shard-{i}-tokens.npy")[0],
                        fed.model.block_size, seed=seed + i)
            for i, lst in enumerate(lists)
        ]  # fmt: skip
        stream = PerClientStream(shards)
    else:
        files = [p for lst in lists for p in read_file_list(lst)]
        tokens, _ = load_tokens(files, tokenizer, cache=work / "union-tokens.npy")
        stream = TokenStream(tokens, fed.model.block_size, seed=seed)
    torch.manual_seed(fed.model.seed)
    model = build_model(fed.model)
    trainer = LocalTrainer(model, fed.training, stream, "cpu")
    evaluator = GlobalEvaluator(fed, eval_files, work / "eval-tokens.npy")
    per_step = fed.training.batch_size * fed.model.block_size
    total_steps = math.ceil(token_budget / per_step)
    trainer.progress = lambda: trainer.step * per_step / token_budget  # read only under lr_progress run_time
    every = max(1, math.ceil(total_steps / max(1, evals)))
    start = time.monotonic()
    with open(out, "w", encoding="utf-8") as f:
        while True:
            point = {
                "t": round(time.monotonic() - start, 3),
                "version": trainer.step,
                "loss": round(evaluator.loss(flatten(trainer.model).numpy()), 5),
                "tokens": trainer.step * per_step,
            }
            f.write(json.dumps(point) + "\n")
            f.flush()
            if trainer.step >= total_steps:
                return
            trainer.train(min(every, total_steps - trainer.step))


def run_single(
    scenario: Scenario,
    fed_file: Path,
    data: DataSplit,
    run_dir: Path,
    token_budget: int,
    *,
    evals: int = 40,
    timeout_s: float = 3600.0,
    method: str = "single",
    batch_size: int | None = None,
    lr: float | None = None,
    per_client: bool = False,
    seed: int = 0,
) -> RunResult:
    """Run a reference in a one-thread subprocess and read its token-indexed loss curve."""
    from client_agent.data.corpus import write_file_list

    (run_dir / "logs").mkdir(parents=True, exist_ok=False)
    eval_list = write_file_list(run_dir / "eval.list", data.eval_files)
    out = run_dir / "curve.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "bench.federation.single",
        "--federation",
        str(fed_file),
        "--data",
        *map(str, data.lists),
        "--eval-list",
        str(eval_list),
        "--tokens",
        str(token_budget),
        "--evals",
        str(evals),
        "--out",
        str(out),
        "--work",
        str(run_dir),
        *(["--batch-size", str(batch_size)] if batch_size is not None else []),
        *(["--lr", repr(lr)] if lr is not None else []),
        *(["--per-client"] if per_client else []),
        *(["--seed", str(seed)] if seed else []),
    ]
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(run_dir / "logs" / "single.log", "wb") as log:
        proc = subprocess.run(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
            cwd=REPO_ROOT,
            timeout=timeout_s,
            check=False,
        )
    if proc.returncode != 0 or not out.is_file():
        raise RunError(f"the single-process baseline exited with {proc.returncode} (see {run_dir / 'logs'})")
    curve = [CurvePoint(**json.loads(line)) for line in out.read_text(encoding="utf-8").splitlines()]
    return RunResult(
        scenario=scenario.name,
        method=method,
        kind="single",
        budget_s=curve[-1].t,
        numel=0,
        curve=curve,
        started_at=started,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.federation.single", description=__doc__.splitlines()[0])
    p.add_argument(
        "--federation", type=Path, required=True, help="federation settings YAML (model, training)"
    )
    p.add_argument(
        "--data", type=Path, nargs="+", required=True, help="the clients' .list files (their union)"
    )
    p.add_argument("--eval-list", type=Path, required=True, help=".list of held-out evaluation files")
    p.add_argument("--tokens", type=int, required=True, help="token budget")
    p.add_argument("--evals", type=int, default=40, help="evaluations along the way (default 40)")
    p.add_argument("--out", type=Path, required=True, help="JSON-lines loss curve to write")
    p.add_argument("--work", type=Path, required=True, help="directory for token caches")
    p.add_argument("--batch-size", type=int, help="sequences per step (default: the federation's batch)")
    p.add_argument("--lr", type=float, help="inner learning rate (default: the federation's)")
    p.add_argument(
        "--per-client", action="store_true", help="each batch an equal share from each --data list's shard"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the batch order (default 0)")
    args = p.parse_args(argv)
    if args.tokens < 1 or args.evals < 1:
        p.error(f"--tokens and --evals must be >= 1, got {args.tokens} and {args.evals}")
    if args.batch_size is not None and args.batch_size < (len(args.data) if args.per_client else 1):
        p.error(f"--batch-size must be >= {len(args.data) if args.per_client else 1}, got {args.batch_size}")
    if args.lr is not None and not 0 < args.lr < 1:
        p.error(f"--lr must lie in (0, 1), got {args.lr}")
    from client_agent.data.corpus import read_file_list

    train_single(
        args.federation,
        args.data,
        read_file_list(args.eval_list),
        args.tokens,
        args.evals,
        args.out,
        args.work,
        batch_size=args.batch_size,
        lr=args.lr,
        per_client=args.per_client,
        seed=args.seed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
