"""Central fine-tuning baseline: one process, the union of the clients' QA data, the same token budget.

`python -m bench.finetune_central --paradigm lora --steps 500` trains the paradigm's preset (full model
with `pretrain`, adapters with `lora`) for `steps` batches on every client's pairs at once, and prints the
same summary lines `geofed local --paradigm` does, plus a `result:` JSON line for the benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from geofed_apps.finetune.base_model import add_recipe_flags, ensure_base_model, recipe_from


def main(argv: list[str] | None = None) -> int:
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
    add_recipe_flags(parser, "base-")
    args = parser.parse_args(argv)

    import torch

    from client_agent.data import load_data, open_stream
    from client_agent.model import count_parameters
    from client_agent.paradigms import client_paradigm
    from client_agent.tokenizer import load_tokenizer
    from client_agent.trainer import LocalTrainer
    from geofed.cli_flags import apply_overrides
    from geofed.config import FederationConfig
    from geofed_apps.finetune.preset import FinetuneTask, preset_settings, summary_lines
    from geofed_apps.local_settings import LOCAL_DEFAULTS, merge_settings

    torch.set_num_threads(1)
    base = ensure_base_model(recipe=recipe_from(args, "base-"))
    settings = apply_overrides(merge_settings(LOCAL_DEFAULTS, preset_settings(args.paradigm, base)), args.set)
    fed = FederationConfig.model_validate(settings)
    with tempfile.TemporaryDirectory() as tmp:
        task = FinetuneTask.write(Path(tmp), args.clients, args.seed, windows=args.windows, renamings=args.renamings)
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
        seconds, tokens = 0.0, 0
        for stop in [*sorted({int(s) for s in args.eval_at.split(",") if s and 0 < int(s) < args.steps}), args.steps]:
            t0 = time.monotonic()
            stats = trainer.train(stop - trainer.step)
            seconds, tokens = seconds + time.monotonic() - t0, tokens + stats.tokens
            t_eval = time.monotonic()
            after = task.score(lambda _: model, one_model=True)
            point = {"step": trainer.step, "train_s": round(seconds, 1), "em": after.shared.exact_match,
                     "f1": after.shared.f1, "eval_loss": after.shared.eval_loss, "own_f1": after.own.f1,
                     "eval_s": round(time.monotonic() - t_eval, 1)}
            print("curve: " + json.dumps(point), flush=True)
    for line in summary_lines(before, after, fed):
        print(line)
    print(
        "result: "
        + json.dumps(
            {
                "trainable": count_parameters(model, trainable_only=True),
                "steps": trainer.step,
                "tokens": tokens,
                "train_s": seconds,
                "em": [before.shared.exact_match, after.shared.exact_match],
                "f1": [before.shared.f1, after.shared.f1],
                "eval_loss": [before.shared.eval_loss, after.shared.eval_loss],
                "own_f1": [before.own.f1, after.own.f1],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
