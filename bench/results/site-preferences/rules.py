"""Rule baselines for the site-specific preference variant: each site's held-out preference accuracy.

    python bench/results/site-preferences/rules.py [N_CLIENTS] [SEED]   # defaults 2 and 0

Site i prefers the parameter names in `site_preference.site_order(i)` (signature or alphabetical order);
its held-out pairs are its own modules' (`own`) and the shared ones (`shared`), both in its order. A rule
sees the prompt and the two answers and picks one; a tie (it cannot tell them apart) counts one half, the
expected score of a coin flip.

- shorter: the shorter answer; the two hold the same names, so always a tie.
- docstring order: the names in the order they first occur in the docstring (the signature is not shown).
- alphabetical: the names in sorted order.
"""

import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from client_agent.data.records import Preference
from client_agent.paradigms.dpo import read_preferences
from geofed_apps.finetune.site_preference import SitePreferenceTask

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def shorter(p: Preference) -> str | None:
    if len(p.chosen) == len(p.rejected):
        return None
    return p.chosen if len(p.chosen) < len(p.rejected) else p.rejected


def docstring_order(p: Preference) -> str | None:
    doc = p.prompt.partition(": ")[2]
    first = {}
    for i, word in enumerate(_WORD.findall(doc)):
        first.setdefault(word, i)
    names = p.chosen.split()
    ordered = " ".join(sorted(names, key=lambda n: first.get(n, len(first)))) + "\n"
    return ordered if ordered in (p.chosen, p.rejected) else None


def alphabetical(p: Preference) -> str | None:
    return " ".join(sorted(p.chosen.split())) + "\n"


RULES: dict[str, Callable[[Preference], str | None]] = {
    "shorter": shorter, "docstring order": docstring_order, "alphabetical": alphabetical,
}


def accuracy(rule: Callable[[Preference], str | None], prefs: list[Preference]) -> float:
    """Percent of pairs the rule prefers rightly, a tie counting one half."""
    hits = [0.5 if (pick := rule(p)) is None else float(pick == p.chosen) for p in prefs]
    return 100 * sum(hits) / len(prefs)


def main() -> None:
    n_clients = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with tempfile.TemporaryDirectory() as tmp:
        task = SitePreferenceTask.write(Path(tmp), n_clients, seed)
        print(f"{n_clients} sites, seed {seed}; held-out preference accuracy (%), a tie counting one half")
        print(f"{'site':<6}{'order':<14}{'held out':<10}{'pairs':>6}" + "".join(f"{r:>17}" for r in RULES))
        for i, order in enumerate(task.orders):
            trained = len(read_preferences(task.client_files[i].with_suffix(".jsonl")))
            for name, path in (("own", task.own_eval_files[i]), ("shared", task.eval_files[i])):
                prefs = read_preferences(path)
                scores = "".join(f"{accuracy(rule, prefs):>17.1f}" for rule in RULES.values())
                print(f"{i:<6}{order:<14}{name:<10}{len(prefs):>6}{scores}")
            print(f"{'':<6}{'':<14}{'trained':<10}{trained:>6}")


if __name__ == "__main__":
    main()
