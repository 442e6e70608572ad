"""The references a federated run's quality is read against, at equal tokens; pure (results in, text out).

Three one-machine references, because they answer different questions:

- **(a) one process at one client's batch** (`single`): the same per-step batch and learning rate as one
  client, so at equal tokens it takes M times more optimizer steps than any site (M clients). A gap against
  it mixes the cost of federating with the cost of a bigger batch.
- **(b) one process at the global batch** (`single-global`): the batch is the sum of the clients' batches per
  step (M × batch), the comparison the DiLoCo papers make against data-parallel training. Its learning rate
  is the best of a small recorded sweep (`SWEEP_LRS`, best by final held-out loss). The headline gap is
  against (b).
- **(c) synchronous data-parallel fp32 at the global batch** (`dp-global`): each step's batch is one batch
  from each client's own shard (what M data-parallel replicas average each step), so it differs from (b)
  only in how the rows are drawn (stratified by site, not from the union). Same sweep.

A sweep point is saved as its own run, `<reference>@lr=<rate>`; every point stays in the results.
"""

from __future__ import annotations

from collections.abc import Sequence

from .results import RunResult
from .tables import fmt, label, markdown, name_of, order, pct, vs_single

REFERENCES = {"a": "single", "b": "single-global", "c": "dp-global"}
LABELS = {
    "a": "(a) one process, one client's batch",
    "b": "(b) one process, global batch",
    "c": "(c) data-parallel fp32, global batch",
}
SWEPT = ("b", "c")
SWEEP_LRS = (0.001, 0.002, 0.004, 0.008)
HEADLINE = "b"
GOALS = {"a": 0.08, "b": 0.03}  # the quality goals: final loss at most this far above the reference


def sweep_method(base: str, lr: float) -> str:
    """The saved method name of one sweep point: 'single-global@lr=0.004'."""
    return f"{base}@lr={lr:g}"


def split_method(method: str) -> tuple[str, float | None]:
    """('single-global', 0.004) from 'single-global@lr=0.004'; (method, None) for any other name."""
    base, sep, rate = method.partition("@lr=")
    if not sep:
        return method, None
    try:
        return base, float(rate)
    except ValueError:
        return method, None


def sweep(runs: Sequence[RunResult], base: str) -> list[RunResult]:
    """The sweep points of reference `base`, by learning rate (first repeat of each)."""
    points = [r for r in runs if r.curve and r.repeat == 1 and split_method(r.method)[0] == base]
    return sorted((r for r in points if split_method(r.method)[1] is not None), key=lambda r: split_method(r.method)[1])


def best_of_sweep(points: Sequence[RunResult]) -> RunResult | None:
    """The sweep point with the lowest final held-out loss; on a tie, the lower learning rate."""
    return min(points, key=lambda r: (r.curve[-1].loss, split_method(r.method)[1]), default=None)


def pick_references(runs: Sequence[RunResult]) -> dict[str, RunResult | None]:
    """Reference letter -> its run: (a) the plain single run, (b) and (c) the best of their sweeps."""
    picked: dict[str, RunResult | None] = {}
    for letter, base in REFERENCES.items():
        if letter in SWEPT:
            picked[letter] = best_of_sweep(sweep(runs, base))
        else:
            picked[letter] = next((r for r in runs if r.method == base and r.repeat == 1 and r.curve), None)
    return picked


def references_table(runs: Sequence[RunResult]) -> str:
    """One row per federated run: its final loss and its gap to each reference at its own token count."""
    refs = pick_references(runs)
    shown = [k for k, r in refs.items() if r is not None]
    head = [
        "method",
        "final loss",
        "tokens (M)",
        *(f"vs {LABELS[k]}" + (" (headline)" if k == HEADLINE else "") for k in shown),
    ]
    rows = []
    for r in order(runs):
        if r.kind != "federated" or not r.curve:
            continue
        gaps = [pct(vs_single(r, refs[k])) for k in shown]
        rows.append([label(r), fmt(r.curve[-1].loss), f"{r.tokens / 1e6:.2f}", *gaps])
    return markdown(head, rows)


def sweep_table(runs: Sequence[RunResult]) -> str:
    """Every recorded sweep point of (b) and (c): learning rate, final loss, tokens; the kept one marked."""
    rows = []
    for letter in SWEPT:
        points = sweep(runs, REFERENCES[letter])
        best = best_of_sweep(points)
        for p in points:
            rows.append(
                [
                    LABELS[letter],
                    f"{split_method(p.method)[1]:g}",
                    fmt(p.curve[-1].loss),
                    f"{p.tokens / 1e6:.2f}",
                    "kept" if p is best else "",
                ]
            )
    return markdown(["reference", "learning rate", "final loss", "tokens (M)", ""], rows)


def quality_lines(runs: Sequence[RunResult], ours: Sequence[str]) -> list[str]:
    """Each run of `ours`: final loss against (b) (the headline) and (a), with the goals, at equal tokens."""
    refs = pick_references(runs)
    if refs[HEADLINE] is None and refs["a"] is None:
        return ["- Quality: no reference run yet (single, single-global or dp-global)."]
    lines = []
    for r in runs:
        if r.method not in ours or not r.curve:
            continue
        who = name_of(r.method) + ("" if r.repeat == 1 else f" (run {r.repeat})")
        parts = []
        for letter in (HEADLINE, "a", "c"):
            ref = refs[letter]
            if ref is None:
                continue
            gap = vs_single(r, ref)
            if gap is None:
                parts.append(f"{LABELS[letter]} did not reach {r.tokens / 1e6:.2f} M tokens")
                continue
            goal = GOALS.get(letter)
            verdict = "" if goal is None else f" (goal ≤ +{100 * goal:.0f}%: **{'met' if gap <= goal else 'not met'}**)"
            parts.append(f"{pct(gap)} vs {LABELS[letter]}{verdict}")
        lines.append(f"- {who}, {r.tokens / 1e6:.2f} M tokens: " + "; ".join(parts) + ".")
    return lines
