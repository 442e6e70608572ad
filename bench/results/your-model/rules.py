"""Rule baselines on the licence pairs' held-out split: the majority class and a keyword rule.

    python bench/results/your-model/rules.py TASK_DIR   # TASK_DIR made by geofed_testing.user_model.make_licence_task
"""

import collections
import json
import sys
from pathlib import Path


def keyword_rule(prompt: str) -> str:
    """A licence's name from words its text uses; GPL-3 otherwise (the most frequent label in training)."""
    if "Mozilla" in prompt:
        return " MPL-2.0" if "2.0" in prompt else " MPL-1.1"
    if "Free Documentation" in prompt or "FDL" in prompt:
        return " GFDL-1.3"
    if "Lesser" in prompt:
        return " LGPL-2.1"
    if "Library General" in prompt:
        return " LGPL-2"
    if "Apache" in prompt:
        return " Apache-2.0"
    if "Artistic" in prompt:
        return " Artistic"
    if "Creative Commons" in prompt or "CC0" in prompt:
        return " CC0-1.0"
    if "Regents" in prompt or "BSD" in prompt:
        return " BSD"
    return " GPL-3"


def main() -> None:
    task = Path(sys.argv[1])
    held = [json.loads(line) for line in (task / "eval" / "pairs.jsonl").open()]
    labels = collections.Counter(p["completion"] for p in held)
    label, n = labels.most_common(1)[0]
    print(f"held-out pairs {len(held)}, labels {len(labels)}")
    print(f"majority class {label.strip()!r}: {n}/{len(held)} = {100 * n / len(held):.1f}%")
    hits = sum(keyword_rule(p["prompt"]) == p["completion"] for p in held)
    print(f"keyword rule: {hits}/{len(held)} = {100 * hits / len(held):.1f}%")


if __name__ == "__main__":
    main()
