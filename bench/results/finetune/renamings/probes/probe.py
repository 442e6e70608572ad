"""The one-seed probes that chose the renamings recipe: central training on renamed copies, scored at quarters.

usage: python bench/results/finetune/renamings/probes/probe.py PARADIGM STEPS COPIES [LR [POOL [SCHEDULE]]]
POOL: `params` (new names from the training answers' parameter names) or `words` (also every word of two
characters or more of the training prompts); SCHEDULE: constant or cosine. Seed 0, the 2-client split's
pairs pooled. The renaming here is this script's own (the product's is `task.with_renamings`, which draws
from the docstrings' words and the answers' names, not from the `# Owner.name:` heads).
"""

from __future__ import annotations

import random
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from client_agent.data.files import load_data  # noqa: E402
from client_agent.data.streams import open_stream  # noqa: E402
from client_agent.data.tokenizer import load_tokenizer  # noqa: E402
from client_agent.paradigms import client_paradigm  # noqa: E402
from client_agent.training.trainer import LocalTrainer  # noqa: E402
from geofed.config import FederationConfig  # noqa: E402
from geofed_apps.finetune import task as T  # noqa: E402
from geofed_apps.finetune.answers import evaluate_answers  # noqa: E402
from geofed_apps.finetune.base_model import ensure_base_model  # noqa: E402
from geofed_apps.finetune.preset import preset_settings  # noqa: E402
from geofed_apps.local_settings import LOCAL_DEFAULTS, merge_settings  # noqa: E402

WORD = r"[A-Za-z_][A-Za-z0-9_]*"


def main() -> None:
    paradigm_name, steps, copies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lr = float(sys.argv[4]) if len(sys.argv) > 4 else None
    pool_kind = sys.argv[5] if len(sys.argv) > 5 else "params"
    schedule = sys.argv[6] if len(sys.argv) > 6 else "constant"
    torch.set_num_threads(1)
    settings = merge_settings(LOCAL_DEFAULTS, preset_settings(paradigm_name, ensure_base_model()))
    if lr:
        settings = merge_settings(settings, {"training": {"lr": lr}})
    if schedule == "cosine":
        settings = merge_settings(settings, {"training": {"lr_schedule": "cosine", "lr_decay_steps": steps}})
    fed = FederationConfig.model_validate(settings)
    split = T.stdlib_qa_split(2, 0)
    pairs = [p for c in split.clients for p in c]
    held = [p for p in split.eval] + [p for own in split.own_eval for p in own]
    refused = {w for p in held for w in p.answer.split()}
    pool = sorted({w for p in pairs for w in p.answer.split()} - refused)
    if pool_kind == "words":
        pool = sorted({w for p in pairs for w in re.findall(WORD, p.doc) if len(w) > 1} - refused)
    rng = random.Random(0)

    def rename(p: T.QAPair) -> T.QAPair | None:
        head, _, doc = p.doc.partition(": ")
        params = p.answer.split()
        used = set(re.findall(WORD, doc))
        new: dict[str, str] = {}
        for q in params:
            while True:
                c = rng.choice(pool)
                if c not in used and c not in new.values():
                    break
            new[q] = c
        pattern = r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, params)) + r")(?![A-Za-z0-9_])"
        context = f"{head}: {re.sub(pattern, lambda m: new[m.group(1)], doc)}"[: T.MAX_CONTEXT_BYTES].rstrip()
        words = set(re.findall(WORD, context.partition(": ")[2]))
        answer = " ".join(new[q] for q in params if new[q] in words)
        if not answer or len(answer) > T.MAX_ANSWER_BYTES:
            return None
        return T.QAPair(context, answer)

    train = list(pairs)
    for _ in range(copies):
        train += [r for r in map(rename, pairs) if r]
    print("train pairs", len(train), "pool", len(pool))
    with tempfile.TemporaryDirectory() as tmp:
        data, _ = load_data([T.write_pairs(Path(tmp) / "t.jsonl", train)], load_tokenizer(None))
        paradigm = client_paradigm(fed.paradigm)
        model = paradigm.prepare(paradigm.build(fed, initialise=True))
        stream = open_stream(data, fed.model.block_size, seed=0)
        trainer = LocalTrainer(model, fed.training, stream, "cpu", micro_batch_size=fed.training.batch_size)
        quarter = steps // 4
        for stop in (quarter, 2 * quarter, 3 * quarter, steps):
            t0 = time.monotonic()
            trainer.train(stop - trainer.step)
            seconds = time.monotonic() - t0
            sc = evaluate_answers(model, split.eval)
            own = sum(evaluate_answers(model, o).f1 for o in split.own_eval) / len(split.own_eval)
            print(f"step {trainer.step} f1 {sc.f1:.1f} em {sc.exact_match:.1f} loss {sc.eval_loss:.3f} "
                  f"own {own:.1f} train_s {seconds:.0f}", flush=True)
        for p, pred in list(zip(split.eval, sc.predictions, strict=True))[:25]:
            print(repr(p.doc[-60:]), "|", p.answer, "|", pred)


if __name__ == "__main__":
    main()
