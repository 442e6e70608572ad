"""Norms of real honest deltas against the PS's norm-bound constants (docs/reliability.md).

    .venv/bin/python bench/honest_norms.py [--rounds 6] [--clients 2] [--local-steps 40] [--model default]

Each client trains the federation's model with its real AdamW (`client_agent.training.trainer.LocalTrainer`, the
default training settings) on its own slice of the Python standard library's sources, H local steps per
round, FedAvg between rounds (every client starts each round from the mean of the last round's models, as
the PS would publish with η = 1). Per round and client it prints ‖δ‖, ‖δ‖ over the AdamW ceiling and over
the start bound and the limit in force (`ps_server.aggregation.norm_bound`), the sum of the client's last
16 deltas over its displacement budget (`displacement`), the factor the PS's own `DeltaGuard` scales the delta
by (each client is one site), and the cosine of δ with the client's previous δ; at the end, how many honest
deltas each rule scaled down. No PS, no network: the deltas are fed to the guard in process.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from real_clients import honest_trainers  # noqa: E402

from client_agent.training.flat import flatten, load_flat_  # noqa: E402
from geofed.config import FederationConfig  # noqa: E402
from ps_server.aggregation.displacement import WINDOW, DeltaSketch  # noqa: E402
from ps_server.aggregation.guard import DeltaGuard  # noqa: E402
from ps_server.aggregation.norm_bound import adamw_ceiling, start_bound  # noqa: E402


def sketch_of(values: np.ndarray) -> np.ndarray:
    sketch = DeltaSketch()
    sketch.add(values.astype(np.float64))
    return sketch.values


SMALL = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}  # bench/attack_bench.py's model


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--local-steps", type=int, default=0, help="H; 0 = the federation default")
    p.add_argument("--model", choices=("default", "small"), default="default")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args()


class _Site:
    """One client as one site: its trainer, its previous delta and its latest deltas (the budget's window)."""

    def __init__(self, index: int, trainer) -> None:
        self.name = f"site{index}"
        self.index = index
        self.trainer = trainer
        self.previous: torch.Tensor | None = None
        self.window: deque[torch.Tensor] = deque(maxlen=WINDOW)


def _one_delta(site: _Site, theta: torch.Tensor, guard: DeltaGuard, r: int, ceiling: float,
               scaled: dict[str, int]) -> torch.Tensor:
    """Train `site` one round from `theta`, feed its delta to the guard, print its row; the delta."""
    t, n = guard.fed.training, theta.numel()
    model = site.trainer.model
    load_flat_(model, theta)
    stats = site.trainer.train(t.local_steps)
    delta = flatten(model).detach() - theta
    norm = float(delta.norm())
    prev = site.previous
    cos = float(torch.dot(delta, prev) / (norm * prev.norm())) if prev is not None else math.nan
    site.previous = delta.clone()
    snapshot = SimpleNamespace(version=r + 1, flat=theta.numpy())
    _, start = guard.limits(snapshot, n)
    norm_scale = guard.scale(site.name, norm, t.local_steps, snapshot, n)
    reference = guard.norms.reference(site.name, start)
    site.window.append(delta.clone())
    cumulative = float(torch.stack(list(site.window)).sum(dim=0).norm())
    push = SimpleNamespace(client_id=site.name, norm=norm, numel=n,
                           header=SimpleNamespace(local_steps=t.local_steps), sketch=sketch_of(delta.numpy()))
    bounded = guard.bound(push, snapshot)
    guard.accepted(site.name, r + 1, bounded.history_norm, t.local_steps)
    if norm_scale < 1:
        scaled["norm_bound"] += 1
    elif bounded.scale < 1:
        scaled["displacement_budget"] += 1
    print(json.dumps({
        "round": r, "client": site.index, "norm": round(norm, 5), "of_ceiling": round(norm / ceiling, 4),
        "of_start": round(norm / start, 4), "of_limit": round(norm / (guard.norms.multiple * reference), 4),
        "cumulative_of_budget": round(cumulative / guard.budget.budget(reference, site.name), 4),
        "scale": round(bounded.scale, 4), "cos_prev": round(cos, 3), "loss": round(stats.mean_loss, 4),
    }), flush=True)
    return delta


def main() -> int:
    args = _parse()
    torch.set_num_threads(args.threads)
    fed_dict: dict = {"model": SMALL} if args.model == "small" else {}
    if args.local_steps:
        fed_dict["training"] = {"local_steps": args.local_steps}
    fed = FederationConfig.model_validate(fed_dict)
    t = fed.training
    sites = [_Site(i, tr) for i, tr in enumerate(honest_trainers(fed, args.clients))]
    theta = flatten(sites[0].trainer.model).detach().clone()
    n = theta.numel()
    ceiling = adamw_ceiling(lr=t.lr, local_steps=t.local_steps, numel=n, weight_decay=t.weight_decay,
                            theta_norm=float(theta.norm()), beta1=t.adam_beta1, beta2=t.adam_beta2)
    start = start_bound(t, n, float(theta.norm()))
    print(json.dumps({"numel": n, "local_steps": t.local_steps, "lr": t.lr, "ceiling": ceiling, "start": start}))
    guard = DeltaGuard(fed)  # the PS's own rules, fed these deltas as pushes of one site per client
    scaled = {"norm_bound": 0, "displacement_budget": 0}
    for r in range(args.rounds):
        news = [_one_delta(site, theta, guard, r, ceiling, scaled) for site in sites]
        theta = theta + torch.stack(news).mean(dim=0)
    print(json.dumps({"honest_deltas": args.rounds * len(sites), "scaled_down_by": scaled}))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
