"""Exported LoRA runs against the majority class and the keyword rule, pair by pair, with transformers alone.

    python bench/results/your-model/paired.py TASK_DIR RUN_DIR...   # RUN_DIR/final_model from geofed local

Each run's `final_model/` is loaded with `AutoModelForCausalLM` and `AutoTokenizer` (not geofed's scorer) and
answers every held-out prompt greedily; an answer is right when its text up to EOS, stripped, equals the pair's
completion, stripped. Against each baseline the exact McNemar test counts the pairs only one of the two gets
right (two-sided binomial p on those discordant pairs).
"""

import json
import math
import sys
from pathlib import Path

import torch
from rules import keyword_rule
from transformers import AutoModelForCausalLM, AutoTokenizer


def mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact p-value of b successes in b + c fair coin flips."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def answers(model_dir: Path, prompts: list[str], max_new: int = 12) -> list[str]:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    context = model.config.max_position_embeddings
    out = []
    for prompt in prompts:
        ids = tok(prompt, return_tensors="pt").input_ids[:, -(context - max_new):]
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=max_new, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.eos_token_id)
        out.append(tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True))
    return out


def held_out(task: Path) -> tuple[list[dict], list[str], dict[str, list[bool]]]:
    """The task's held-out pairs, their answers, and which of them each baseline gets right."""
    held = [json.loads(line) for line in (task / "eval" / "pairs.jsonl").open()]
    truth = [p["completion"].strip() for p in held]
    train = [json.loads(line) for f in sorted((task / "train").glob("*.jsonl")) for line in f.open()]
    answers_seen = [p["completion"] for p in train]
    majority = max(set(answers_seen), key=answers_seen.count).strip()
    baselines = {
        "majority class of training": [t == majority for t in truth],
        "keyword rule": [keyword_rule(p["prompt"]).strip() == t for p, t in zip(held, truth, strict=True)],
    }
    return held, truth, baselines


def right_answers(run: Path, held: list[dict], truth: list[str]) -> list[bool]:
    said = answers(run / "final_model", [p["prompt"] for p in held])
    return [a.strip() == t for a, t in zip(said, truth, strict=True)]


def compare(name: str, got: list[bool], right: list[bool]) -> str:
    b = sum(g and not r for g, r in zip(got, right, strict=True))
    c = sum(r and not g for g, r in zip(got, right, strict=True))
    return f"  vs {name}: LoRA alone right {b}, baseline alone right {c}, McNemar exact p = {mcnemar_p(b, c):.4f}"


def main() -> None:
    task = Path(sys.argv[1])
    held, truth, baselines = held_out(task)
    for name, right in baselines.items():
        print(f"{name}: {sum(right)}/{len(truth)} = {100 * sum(right) / len(truth):.1f}%")
    for run in sys.argv[2:]:
        got = right_answers(Path(run), held, truth)
        print(f"{run}: exact match {sum(got)}/{len(truth)} = {100 * sum(got) / len(truth):.1f}%")
        for name, right in baselines.items():
            print(compare(name, got, right))


if __name__ == "__main__":
    main()
