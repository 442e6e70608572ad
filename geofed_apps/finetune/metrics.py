"""SQuAD-style answer metrics (the paper tracks exact match and F1): exact match and token F1.

Answers are space-separated parameter names; F1 counts shared names (SQuAD's bag of tokens), exact
match needs every name in order. Pure Python: the evaluator decodes, these compare.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_PUNCT = re.compile(r"[^A-Za-z0-9_\s]+")


def normalize(answer: str) -> str:
    """Punctuation dropped (SQuAD's normalisation) and whitespace collapsed; names are case-sensitive."""
    return " ".join(_PUNCT.sub(" ", answer).split())


def answer_tokens(answer: str) -> list[str]:
    """The names in a normalised answer."""
    return normalize(answer).split()


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize(prediction) == normalize(truth))


def token_f1(prediction: str, truth: str) -> float:
    """Harmonic mean of name precision and recall (SQuAD's token F1)."""
    pred, gold = answer_tokens(prediction), answer_tokens(truth)
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def score(predictions: Sequence[str], truths: Sequence[str]) -> tuple[float, float]:
    """(exact match, F1) as percentages over aligned predictions and truths."""
    if len(predictions) != len(truths) or not truths:
        raise ValueError(f"need as many predictions as truths (> 0), got {len(predictions)} and {len(truths)}")
    em = sum(map(exact_match, predictions, truths)) / len(truths)
    f1 = sum(map(token_f1, predictions, truths)) / len(truths)
    return 100 * em, 100 * f1
