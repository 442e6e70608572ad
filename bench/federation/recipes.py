"""Candidate pretraining recipes for the measured search: each a federation-settings override of the
scenario's base settings (`geofed local`'s defaults under the harness's), named `recipe-<tag>`.

Every synchronous candidate waits at a barrier for every site (quorum 1, straggler timeout and sync interval
far beyond any budget) so that its local-step count H binds, and syncs round by round; the codec stays the
defaults' int8 + Huffman with error feedback. The search and its results: docs/benchmarks.md,
"A pretraining recipe by measurement".
"""

from __future__ import annotations

from typing import Any

from .barrier import BARRIER_S, sync_aggregation


def _sync(h: int, *, outer: str = "fedavg", eta: float = 1.0, momentum: float = 0.9, lr: float | None = None,
          **training: Any) -> dict[str, Any]:
    train = {"local_steps": h, "sync_interval_s": BARRIER_S, "overlap_sync": False, **training}
    if lr is not None:
        train["lr"] = lr
    return {"aggregation": sync_aggregation(outer, eta, momentum=momentum), "training": train}


# tag -> (summary, overrides)
CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    "sync-h40": ("sync FedAvg η 1, H 40, inner lr 0.003 (int8)", _sync(40)),
    "sync-h10": ("sync FedAvg η 1, H 10, inner lr 0.003", _sync(10)),
    "sync-h40-lr15": ("sync FedAvg η 1, H 40, inner lr 0.0015", _sync(40, lr=0.0015)),
    "sync-h10-lr15": ("sync FedAvg η 1, H 10, inner lr 0.0015", _sync(10, lr=0.0015)),
    "sync-h20-lr2": ("sync FedAvg η 1, H 20, inner lr 0.002", _sync(20, lr=0.002)),
    "diloco-h40": ("sync Nesterov η 0.7 μ 0.9, H 40, inner lr 0.003", _sync(40, outer="nesterov", eta=0.7)),
    "diloco-h10": ("sync Nesterov η 0.7 μ 0.9, H 10, inner lr 0.003", _sync(10, outer="nesterov", eta=0.7)),
    "sync-h5": ("sync FedAvg η 1, H 5, inner lr 0.003", _sync(5)),
    "sync-h20": ("sync FedAvg η 1, H 20, inner lr 0.003", _sync(20)),
    "async-h40": (
        "ours (async) with H 40 local steps: geofed's default H until this search",
        {"training": {"local_steps": 40}},
    ),
    "async-h10": ("ours (async) with H 10 local steps: geofed's defaults since", {"training": {"local_steps": 10}}),
    "auto-h10": (
        "ours with aggregation.mode auto and H 10 local steps",
        {"aggregation": {"mode": "auto"}, "training": {"local_steps": 10}},
    ),
    "auto-h10-eta05": (
        "ours with aggregation.mode auto, H 10 and FedAvg η 0.5 in sync rounds too (its own η before it followed "
        "the mode)",
        {"aggregation": {"mode": "auto", "global_lr": 0.5}, "training": {"local_steps": 10}},
    ),
    "auto-h10-interval": (
        "ours with aggregation.mode auto, H 10 local steps and autotune.interval (thin links lengthen rounds)",
        {"aggregation": {"mode": "auto"}, "training": {"local_steps": 10}, "autotune": {"interval": True}},
    ),
    "async-h10-interval": (
        "ours (async) with H 10 local steps and autotune.interval (thin links lengthen rounds)",
        {"training": {"local_steps": 10}, "autotune": {"interval": True}},
    ),
    "sync-h10-overlap": ("sync FedAvg η 1, H 10, overlapped sync", _sync(10, overlap_sync=True)),
    "async-lr15": ("ours (async, defaults) with inner lr 0.0015", {"training": {"lr": 0.0015}}),
}
