"""Three-fold cross-validation of the licence task: every pair held out once, scored pair by pair.

    python bench/results/your-model/crossval.py split TASK_DIR FOLDS_DIR      # FOLDS_DIR/k{0,1,2}/{train,eval}
    python bench/results/your-model/crossval.py score FOLDS_DIR RUN_DIR0 RUN_DIR1 RUN_DIR2

`split` pools the task's pairs, shuffles them (seed 0) and deals them into three folds; fold k holds out
its third and trains on the other two. `score` loads each fold's run (`RUN_DIRk/final_model`, trained on fold
k) with transformers alone, answers fold k's held-out pairs, and pools the three: every pair is answered by a
model that never trained on it. Against the majority class of each fold's training pairs and the keyword rule,
the exact McNemar test on the pooled pairs (`paired.py`).
"""

import random
import sys
from pathlib import Path

from paired import compare, held_out, right_answers

FOLDS = 3


def split(task: Path, folds: Path) -> None:
    pairs = [line for part in ("train", "eval") for f in sorted((task / part).glob("*.jsonl"))
             for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    random.Random(0).shuffle(pairs)
    for k in range(FOLDS):
        for part, chosen in (("eval", pairs[k::FOLDS]),
                             ("train", [p for i, p in enumerate(pairs) if i % FOLDS != k])):
            out = folds / f"k{k}" / part
            out.mkdir(parents=True, exist_ok=True)
            (out / "pairs.jsonl").write_text("\n".join(chosen) + "\n", encoding="utf-8")
        print(f"fold {k}: {len(pairs[k::FOLDS])} held out, {len(pairs) - len(pairs[k::FOLDS])} trained")


def score(folds: Path, runs: list[Path]) -> None:
    got: list[bool] = []
    right: dict[str, list[bool]] = {}
    for k, run in enumerate(runs):
        held, truth, baselines = held_out(folds / f"k{k}")
        fold = right_answers(run, held, truth)
        print(f"fold {k} ({run}): exact match {sum(fold)}/{len(truth)} = {100 * sum(fold) / len(truth):.1f}%, "
              + ", ".join(f"{name} {sum(r)}/{len(r)}" for name, r in baselines.items()))
        got += fold
        for name, r in baselines.items():
            right.setdefault(name, []).extend(r)
    print(f"pooled: exact match {sum(got)}/{len(got)} = {100 * sum(got) / len(got):.1f}%")
    for name, r in right.items():
        print(f"pooled {name}: {sum(r)}/{len(r)} = {100 * sum(r) / len(r):.1f}%")
        print(compare(name, got, r))


if __name__ == "__main__":
    if sys.argv[1] == "split":
        split(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        score(Path(sys.argv[2]), [Path(r) for r in sys.argv[3:]])
