"""Central fine-tuning baseline: one process, the union of the clients' QA data, the same token budget.

`python -m bench.finetune_central --paradigm lora --steps 500` trains the paradigm's preset (full model
with `pretrain`, adapters with `lora`) for `steps` batches on every client's pairs at once, and prints the
same summary lines `geofed local --paradigm` does, plus a `result:` JSON line for the benchmark.
`--task stdlib-package` trains and scores on the second task's pairs of that seed, as `geofed local --task`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from geofed_apps.finetune.base_model import add_recipe_flags, describe, ensure_base_model, recipe_from
from geofed_apps.finetune.package_task import NAME as PACKAGE_TASK


def _write_task(out_dir: Path, args: argparse.Namespace, fed):
    """The clients' pairs and held-out pairs of `args.task`, split as `geofed local` splits them for that seed."""
    from geofed_apps.finetune.preset import FinetuneTask

    if args.task == "docstring-params":
        return FinetuneTask.write(out_dir, args.clients, args.seed, windows=args.windows, renamings=args.renamings)
    from geofed_apps.finetune.package_task import task_dirs
    from geofed_apps.finetune.user_task import UserSplit, UserTask, tokenizer_of

    train_dir, eval_dir = task_dirs(args.seed)
    split = UserSplit.read(train_dir, eval_dir, args.clients, args.seed, fed.training.eval_fraction,
                           tokenizer_of(fed), fed.model.block_size)
    return UserTask.write(out_dir, split, fed)


def _shared(scores):
    """The held-out scores every task has (the docstring task's also has own-domain ones)."""
    return getattr(scores, "shared", scores)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paradigm", default="lora", help="preset whose model and settings to train")
    parser.add_argument("--steps", type=int, required=True, help="batches to train (the federation's total)")
    parser.add_argument("--clients", type=int, default=2, help="clients whose data to pool (the split's)")
    parser.add_argument("--seed", type=int, default=0, help="data order and client split seed (as geofed local's)")
    parser.add_argument("--eval-at", default="", help="comma-separated step counts below --steps at which to also "
                        "score the held-out answers (a `curve:` JSON line each; training goes on unchanged)")
    parser.add_argument("--windows", action="store_true", help="also train on each training function's later "
                        "docstring windows that name a parameter (the held-out pairs are the same)")
    parser.add_argument("--renamings", type=int, default=0, help="also train on this many copies of each "
                        "training pair with its parameters renamed to other words of the training docstrings")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting of the preset, as `geofed local --set` does")
    parser.add_argument("--task", default="docstring-params", choices=("docstring-params", PACKAGE_TASK),
                        help="the pairs to train and score on, as `geofed local --task` (default docstring-params)")
    add_recipe_flags(parser, "base-")
    return parser


def _train_and_score(trainer, model, task, args) -> tuple[object, float, int]:
    """Train to --steps, scoring the held-out answers at each --eval-at step and at the end (a `curve:` line
    each); the last score, the training seconds and the tokens trained."""
    seconds, tokens = 0.0, 0
    for stop in [*sorted({int(s) for s in args.eval_at.split(",") if s and 0 < int(s) < args.steps}), args.steps]:
        t0 = time.monotonic()
        stats = trainer.train(stop - trainer.step)
        seconds, tokens = seconds + time.monotonic() - t0, tokens + stats.tokens
        t_eval = time.monotonic()
        after = task.score(lambda _: model, one_model=True)
        shared = _shared(after)
        point = {"step": trainer.step, "train_s": round(seconds, 1), "em": shared.exact_match,
                 "f1": shared.f1, "eval_loss": shared.eval_loss, "eval_s": round(time.monotonic() - t_eval, 1)}
        if shared is not after:
            point["own_f1"] = after.own.f1
        print("curve: " + json.dumps(point), flush=True)
    return after, seconds, tokens


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.task != "docstring-params" and (args.windows or args.renamings):
        parser.error(f"--task {args.task} brings its own pairs: no --windows, --renamings")

    import torch

    from client_agent.data.files import load_data
    from client_agent.data.streams import open_stream
    from client_agent.data.tokenizer import load_tokenizer
    from client_agent.paradigms import client_paradigm
    from client_agent.training.model import count_parameters
    from client_agent.training.trainer import LocalTrainer
    from geofed.cli_flags import apply_overrides
    from geofed.config import FederationConfig
    from geofed_apps.finetune.preset import preset_settings, summary_lines, with_base_targets
    from geofed_apps.local_settings import LOCAL_DEFAULTS, merge_settings

    torch.set_num_threads(1)
    base = ensure_base_model(recipe=recipe_from(args, "base-"))
    settings = apply_overrides(merge_settings(LOCAL_DEFAULTS, preset_settings(args.paradigm, base)), args.set)
    settings = with_base_targets(settings, str(base))  # the adapter layers `geofed local` wraps on this base
    fed = FederationConfig.model_validate(settings)
    print(describe(fed.model), flush=True)  # `base model: sha256 ...`, as every federated run's first line
    with tempfile.TemporaryDirectory() as tmp:
        task = _write_task(Path(tmp), args, fed)
        files = [Path(line) for f in task.client_files for line in f.read_text().split()]
        data, _ = load_data(files, load_tokenizer(None))
        before = task.score_base(fed)
        paradigm = client_paradigm(fed.paradigm)
        model = paradigm.prepare(paradigm.build(fed, initialise=True))
        trainer = LocalTrainer(
            model,
            fed.training,
            open_stream(data, fed.model.block_size, seed=args.seed),
            "cpu",
            micro_batch_size=fed.training.batch_size,
        )
        after, seconds, tokens = _train_and_score(trainer, model, task, args)
    lines = summary_lines(before, after, fed) if args.task == "docstring-params" else task.summary_lines(before, after)
    for line in lines:
        print(line)
    b, a = _shared(before), _shared(after)
    result = {
        "trainable": count_parameters(model, trainable_only=True),
        "steps": trainer.step,
        "tokens": tokens,
        "train_s": seconds,
        "em": [b.exact_match, a.exact_match],
        "f1": [b.f1, a.f1],
        "eval_loss": [b.eval_loss, a.eval_loss],
    }
    if a is not after:
        result["own_f1"] = [before.own.f1, after.own.f1]
    print("result: " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
