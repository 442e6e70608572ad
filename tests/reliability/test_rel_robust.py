"""Robust aggregation against a poisoned client (issue 5, item 4; paper §IV: Byzantine-robust aggregation).

Nine honest clients push deltas around a common direction μ, one pushes -1000·μ. Without a defence (the
default norm bound turned off) the round's mean is dragged ~100·|μ| away from the honest mean; with the
default norm bound, coordinate-wise median, trimmed mean or per-client norm clipping it stays within a
fraction of |μ|. (Asynchronous robust windows are checked against a reference in
tests/ps/test_aggregation_guard_unit.py.)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from geofed_testing.ledger import EXACT_ASYNC
from geofed_testing.procs import PSNode
from geofed_testing.wire import Observer, init_model, join, push, theta0

NUMEL, HONEST = 3000, 9
DEFENCES = {
    "none": ({"norm_bound_multiple": 0}, lambda err: err > 50),
    "default": ({}, lambda err: err < 0.5),  # the norm bound: the poison is clipped to 3 × the median norm
    "median": ({"robust": "median"}, lambda err: err < 0.25),
    "trimmed_mean": ({"robust": "trimmed_mean", "trim_fraction": 0.1}, lambda err: err < 0.25),
    "clip_norm": ({"clip_norm": 0.75}, lambda err: err < 0.35),
}


def _deltas() -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(7)
    mu = (rng.standard_normal(NUMEL) * 0.01).astype(np.float32)  # |μ| ≈ 0.55
    honest = [(mu + rng.standard_normal(NUMEL) * 0.002).astype(np.float32) for _ in range(HONEST)]
    return mu, honest, (-1000 * mu).astype(np.float32)


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """One PS per defence (started in parallel), each fed the same 10-delta round."""
    mu, honest, poison = _deltas()
    procs = {}
    for name, (agg, _) in DEFENCES.items():
        agg = {**EXACT_ASYNC["aggregation"], "buffer_size": HONEST + 1, "buffer_timeout_s": 120, **agg}
        fed = {**EXACT_ASYNC, "aggregation": agg}
        procs[name] = PSNode(tmp_path_factory.mktemp(name) / "ps", fed)
    try:
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(PSNode.start, procs.values()))

        def play(ps: PSNode) -> np.ndarray:
            clients = [join(ps, f"rob.c{i}", master=(i == 0), start=False) for i in range(HONEST + 1)]
            try:
                init_model(clients[0], theta0(NUMEL))
                for c, d in zip(clients, [*honest, poison], strict=True):
                    push(c, 1, d)
                version, model = Observer(ps).model()
                assert version == 2, "the ten deltas should close exactly one round"
                return model
            finally:
                for c in clients:
                    c.close()

        with ThreadPoolExecutor(len(procs)) as pool:
            models = dict(zip(procs, pool.map(play, procs.values()), strict=True))
    finally:
        for ps in procs.values():
            ps.kill()
    honest_mean = np.mean(honest, axis=0)
    return {name: float(np.linalg.norm(m - theta0(NUMEL) - honest_mean) / np.linalg.norm(mu))
            for name, m in models.items()}


@pytest.mark.parametrize("defence", list(DEFENCES))
def test_poisoned_delta_is_contained_only_with_a_defence(rounds, defence):
    error = rounds[defence]  # distance from the honest mean, in units of |μ|

    assert DEFENCES[defence][1](error), f"{defence}: error {error:.3f} |μ|"
    print(f"{defence}: global step is {error:.3f} |μ| from the honest mean")
