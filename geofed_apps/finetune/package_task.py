"""A second fine-tuning task: which stdlib package a function's docstring comes from (classification).

Every function or method with a docstring in one of the stdlib's largest packages (`LABELS`, test suites
excluded) gives one pair: the prompt is the start of its docstring (whitespace collapsed, the function's
name not shown), the completion the package's name. Identical docstrings are kept once (and dropped when
two packages share one). The pairs are shuffled with `seed` and `EVAL_PAIRS` of them held out, enough that
a binomial 95 % interval on accuracy is about ±3 points (`interval.py`). The answer is a label, never a
word of the prompt most of the time: `rule_scores` gives the best few-line rules (the most frequent label;
each prompt word's most frequent label in training, voting) to measure headroom against.

What a real user's classification task has that this stand-in does not: labels chosen for a purpose (here a
package name, which a word vote already gets right 69 % of the time), noisy or ambiguous examples, and classes
far less balanced; the pipeline (pairs, held-out split, scoring, intervals) is the same.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from client_agent.data.corpus import stdlib_files, stdlib_root

NAME = "stdlib-package"
LABELS = ("asyncio", "email", "tkinter", "idlelib", "multiprocessing", "unittest", "xml", "http", "importlib",
          "concurrent", "lib2to3", "json", "logging", "sqlite3", "urllib", "ctypes")
MAX_DOC_BYTES = 90  # prompt + label fit the base model's 128 bytes
EVAL_PAIRS = 1200
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[a-z]+")


def prompt_of(doc: str) -> str:
    return f"Docstring: {doc}\nPackage:"


def _docstrings(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    docs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc and doc.isascii():
                docs.append(_SPACE.sub(" ", doc).strip().encode()[:MAX_DOC_BYTES].decode())
    return docs


def package_pairs(root: Path | None = None) -> list[tuple[str, str]]:
    """(docstring start, package) for every distinct docstring of the `LABELS` packages, sorted."""
    root = root or stdlib_root()
    labels: dict[str, set[str]] = defaultdict(set)
    for path in stdlib_files(root=root):
        package = path.relative_to(root).parts[0]
        if package in LABELS and len(path.relative_to(root).parts) > 1:
            for doc in _docstrings(path):
                labels[doc].add(package)
    return sorted((doc, next(iter(found))) for doc, found in labels.items() if len(found) == 1 and len(doc) >= 8)


def split_pairs(pairs: Sequence[tuple[str, str]], seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, held-out): `EVAL_PAIRS` pairs held out after a seeded shuffle."""
    if len(pairs) < 2 * EVAL_PAIRS:
        raise ValueError(f"{len(pairs)} docstrings are too few for {EVAL_PAIRS} held-out pairs")
    shuffled = list(pairs)
    random.Random(seed).shuffle(shuffled)
    return shuffled[EVAL_PAIRS:], shuffled[:EVAL_PAIRS]


def _write(path: Path, pairs: Sequence[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for doc, label in pairs:
            f.write(json.dumps({"prompt": prompt_of(doc), "completion": f" {label}"}) + "\n")


def write_package_task(directory: Path, seed: int = 0) -> tuple[Path, Path]:
    """`train/pairs.jsonl` and `eval/pairs.jsonl` under `directory` (written once per seed), as --data and
    --eval-data read them."""
    train_dir, eval_dir = directory / f"seed-{seed}" / "train", directory / f"seed-{seed}" / "eval"
    if not (eval_dir / "pairs.jsonl").exists():
        train, held = split_pairs(package_pairs(), seed)
        _write(train_dir / "pairs.jsonl", train)
        _write(eval_dir / "pairs.jsonl", held)
    return train_dir, eval_dir


def task_dirs(seed: int = 0) -> tuple[Path, Path]:
    """The task's (train, eval) directories of `seed`, written once under the geofed cache."""
    from .base_model import default_cache

    return write_package_task(default_cache() / "tasks" / NAME, seed)


def most_frequent_label(train: Sequence[tuple[str, str]]):
    top = Counter(label for _, label in train).most_common(1)[0][0]
    return lambda doc: top


def word_vote(train: Sequence[tuple[str, str]]):
    """Each prompt word votes for the label it came with most often in training; ties and no votes: the most
    frequent label."""
    seen: dict[str, Counter[str]] = defaultdict(Counter)
    for doc, label in train:
        for word in set(_WORD.findall(doc.lower())):
            seen[word][label] += 1
    fallback = most_frequent_label(train)("")

    def rule(doc: str) -> str:
        votes = Counter()
        for word in set(_WORD.findall(doc.lower())):
            if word in seen:
                counts = seen[word]
                total = sum(counts.values())
                for label, n in counts.items():
                    votes[label] += n / total
        return votes.most_common(1)[0][0] if votes else fallback

    return rule


def rule_scores(train: Sequence[tuple[str, str]], held: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Accuracy (percent) of each rule on the held-out pairs."""
    rules = {"most-frequent-label": most_frequent_label(train), "word-vote": word_vote(train)}
    return {name: 100.0 * sum(rule(doc) == label for doc, label in held) / len(held) for name, rule in rules.items()}
