"""Loss-versus-time and rate-distortion PNGs for docs/benchmarks.md (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .results import RunResult
from .tables import RatePoint, label, order

STYLE = {
    "fedavg": "tab:blue",
    "diloco": "tab:orange",
    "fednova": "tab:green",
    "ours": "tab:red",
    "ours-damped": "tab:purple",
    "ours-eta1": "tab:pink",
    "ours-buffered": "tab:brown",
    "single": "black",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_loss(runs: Sequence[RunResult], target: float | None, title: str, path: Path) -> None:
    """Global eval loss against wall-clock seconds (left) and training tokens, with the baseline (right)."""
    plt = _pyplot()
    fig, (ax_t, ax_n) = plt.subplots(1, 2, figsize=(12, 5.4), sharey=True)
    for r in order(runs):
        if not r.curve:
            continue
        color = STYLE.get(r.method, None)
        dash = "-" if r.repeat == 1 else ":"
        ts, ls, ns = zip(*((p.t, p.loss, p.tokens / 1e6) for p in r.curve), strict=True)
        if r.kind == "federated":
            ax_t.step(
                [*ts, r.budget_s], [*ls, ls[-1]], where="post", color=color, linestyle=dash, label=label(r)
            )
            ax_n.step(ns, ls, where="post", color=color, linestyle=dash, label=label(r))
        else:
            ax_n.plot(ns, ls, color=color, linestyle="--", label=label(r))
    if target is not None:
        for ax in (ax_t, ax_n):
            ax.axhline(target, color="grey", linewidth=0.8, linestyle="--")
        ax_t.annotate(
            f"target {target:.3f}", (0, target), textcoords="offset points", xytext=(4, 4), fontsize=8
        )
    losses = [p.loss for r in runs for p in r.curve]
    if losses:  # the interesting range: from the best loss to 2 above it (spikes leave the frame)
        ax_t.set_ylim(min(losses) - 0.1, min(max(losses), min(losses) + 2.0) + 0.05)
    ax_t.set_xlabel("wall-clock seconds since Θ0 reached the PS")
    ax_n.set_xlabel("training tokens behind the global model (millions)")
    ax_t.set_ylabel("held-out eval loss (nats/token)")
    for ax in (ax_t, ax_n):
        ax.grid(alpha=0.3)
    handles, labels = ax_n.get_legend_handles_labels()  # the token panel has every run, the baseline too
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # room for the legend under the panels
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_ratedist(points: Sequence[RatePoint], title: str, path: Path) -> None:
    """Late eval loss against encoded bytes per parameter per push (log scale), one point per codec."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for p in points:
        marker = "o" if p.error_feedback else "x"
        ax.scatter(
            p.bytes_per_param,
            p.tail_loss,
            marker=marker,
            color="tab:red" if p.error_feedback else "tab:blue",
        )
        text = (
            f"{p.codec}{' blocks' if p.scales.startswith('per') else ''}{' +EF' if p.error_feedback else ''}"
        )
        ax.annotate(
            text, (p.bytes_per_param, p.tail_loss), textcoords="offset points", xytext=(4, 3), fontsize=7
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("encoded bytes per parameter per push (fp32 = 4)")
    ax.set_ylabel("held-out eval loss, mean over the last quarter of the budget")
    ax.grid(alpha=0.3, which="both")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
