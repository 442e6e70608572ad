"""Trivial-rule baselines for the parameter-name task: what a few lines get without any model.

Each rule sees the training pairs (for statistics) and one held-out prompt. `most-frequent` answers
every prompt with the commonest training answer; `copy-from-prompt` copies the words of the context that
are known parameter names (names used by at least `MIN_USES` training functions), in order, at most
`k`; `copy-name-first` does the same with the function's own name split at underscores first;
`marked-then-copy` takes the words the docstring marks up as code or emphasis, else copies. The
benchmark publishes all of them beside the model rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from .metrics import score
from .task import QAPair

MIN_USES = 3
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MARKED = re.compile(r"[*`]+([A-Za-z_][A-Za-z0-9_]*)[*`]+")
_STOP = frozenset("a an and as be by for from if in is it not of on or that the this to with".split())

Rule = Callable[[QAPair], str]


def _known_names(train: Sequence[QAPair]) -> Counter[str]:
    names = Counter(n for p in train for n in p.answer.split())
    return Counter({n: c for n, c in names.items() if c >= MIN_USES and n not in _STOP})


def most_frequent(train: Sequence[QAPair]) -> Rule:
    answer = Counter(p.answer for p in train).most_common(1)[0][0]
    return lambda pair: answer


def copy_from_prompt(train: Sequence[QAPair], k: int = 2, name_first: bool = False) -> Rule:
    known = _known_names(train)

    def rule(pair: QAPair) -> str:
        head, _, summary = pair.doc.removeprefix("# ").partition(": ")
        words = head.rsplit(".", 1)[-1].split("_") if name_first else []
        words += _WORD.findall(summary)
        return " ".join(list(dict.fromkeys(w for w in words if w in known))[:k])

    return rule


def marked_then_copy(train: Sequence[QAPair], k: int = 2) -> Rule:
    """The words the docstring marks up (`*name*`, ``` ``name`` ```, `` `name` ``), else `copy_from_prompt`'s."""
    fallback = copy_from_prompt(train, k)

    def rule(pair: QAPair) -> str:
        marked = list(dict.fromkeys(_MARKED.findall(pair.doc.partition(": ")[2])))
        return " ".join(marked[:k]) if marked else fallback(pair)

    return rule


def rules(train: Sequence[QAPair]) -> dict[str, Rule]:
    """Every published rule, by name."""
    out: dict[str, Rule] = {"most-frequent": most_frequent(train)}
    for k in (1, 2, 3):
        out[f"copy-from-prompt k={k}"] = copy_from_prompt(train, k)
        out[f"copy-name-first k={k}"] = copy_from_prompt(train, k, name_first=True)
        out[f"marked-then-copy k={k}"] = marked_then_copy(train, k)
    return out


def rule_scores(train: Sequence[QAPair], held: Sequence[QAPair]) -> dict[str, tuple[float, float]]:
    """(exact match, F1) in percent of each rule on `held`."""
    truths = [p.answer for p in held]
    return {name: score([rule(p) for p in held], truths) for name, rule in rules(train).items()}
