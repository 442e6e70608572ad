"""LoRA's product aggregation over several rounds, against an independent numpy reference.

The reference keeps the exact global product X: X₀ = B₀A₀, Xₜ₊₁ = Xₜ + outer(mean of the clients' clipped
BᵢAᵢ − BₜAₜ). Exact means the published factors are X's best rank-r approximation every round, so the
only difference from X is its spectral tail: what the clients contributed is never thrown away.
"""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import FederationConfig
from geofed.manifest import TensorEntry
from geofed_testing.payloads import FakePayload
from ps_server.aggregation.rounds import Admission
from ps_server.aggregation.strategies import build_strategy
from ps_server.global_model import Snapshot

R, N_IN, N_OUT = 2, 7, 5
MANIFEST = (
    TensorEntry("l.lora_A.default.weight", (R, N_IN), "float32"),
    TensorEntry("l.lora_B.default.weight", (N_OUT, R), "float32"),
)


def _strategy(**agg):
    settings = {"global_lr": 1.0, "outer_optimizer": "fedavg", "weighting": "uniform", "norm_bound_multiple": 0.0}
    fed = FederationConfig.model_validate(
        {
            "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
            "aggregation": {**settings, **agg},
            "paradigm": {"name": "lora", "rank": R, "target_modules": ["c_attn"], "aggregation": "product"},
        }
    )
    strategy = build_strategy(fed)
    strategy.install(R * N_IN + N_OUT * R, MANIFEST)
    return strategy


def _factors(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return flat[: R * N_IN].reshape(R, N_IN).astype(np.float64), flat[R * N_IN :].reshape(N_OUT, R).astype(np.float64)


def _flat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.concatenate([a.ravel(), b.ravel()]).astype(np.float32)


def _product(flat: np.ndarray) -> np.ndarray:
    a, b = _factors(flat)
    return b @ a


def _tail(x: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.linalg.svd(x, compute_uv=False)[R:] ** 2)))


def _round(strategy, version: int, flat: np.ndarray, clients: list[np.ndarray]) -> np.ndarray:
    snap = Snapshot(version, flat, b"", MANIFEST)
    acc = strategy.open_round(snap)
    for i, client in enumerate(clients):
        strategy.fold(acc, FakePayload(f"c{i}", client - flat), Admission(0, 1.0), num_tokens=100, local_steps=1)
    round_sum = strategy.close(acc)
    assert round_sum.delta.size == strategy.round_numel(snap) == N_OUT * N_IN
    return strategy.apply(snap, round_sum)


def test_a_direction_truncation_drops_is_carried_until_it_wins_and_the_error_never_exceeds_the_tail():
    # Rank 2: u1 = 3·(e1e1ᵀ + e3e3ᵀ) fills it, u2 = e2e2ᵀ is added every round after the first.
    u1 = np.zeros((N_OUT, N_IN))
    u1[0, 0] = u1[2, 2] = 3.0
    u2 = np.zeros((N_OUT, N_IN))
    u2[1, 1] = 1.0
    strategy = _strategy()
    rng = np.random.default_rng(0)
    flat = _flat(rng.normal(size=(R, N_IN)), np.zeros((N_OUT, R)))

    def client_with(product: np.ndarray, a_like: np.ndarray) -> np.ndarray:  # factors of a rank ≤ r product
        u, s, vt = np.linalg.svd(product)
        c = np.linalg.norm(a_like) / np.sqrt(R)
        return _flat(c * vt[:R], u[:, :R] * (s[:R] / c))

    exact = _product(flat)
    errors = []
    for t in range(7):
        a, b = _factors(flat)
        current = b @ a
        if t == 0:  # B = 0 and one client reports 2·u1: the mean product is u1
            clients = [client_with(2 * u1, a), flat.copy()]
        else:  # client 1 doubles BA, client 2 reports 2·u2: the mean product is BA + u2
            clients = [_flat(a, 2 * b), client_with(2 * u2, a)]
        exact = exact + (np.mean([_product(c) for c in clients], axis=0) - current)
        flat = _round(strategy, t + 1, flat, clients)
        error = float(np.linalg.norm(exact - _product(flat)))
        errors.append(error)
        assert error == pytest.approx(_tail(exact), abs=1e-4)

    # exact = u1 + t·u2: its rank-2 approximation keeps u1 while t < 3, then t·u2 and one axis of u1.
    assert errors[:4] == pytest.approx([0.0, 1.0, 2.0, 3.0], abs=1e-4)
    assert max(errors) <= 3.0 + 1e-4  # truncation without the carried remainder would reach 6 (u2 never kept)
    assert np.allclose(_product(flat)[1, 1], 6.0, atol=1e-4)


@pytest.mark.parametrize(
    ("agg", "clip"),
    [({}, 0.0), ({"global_lr": 0.7, "outer_optimizer": "nesterov", "momentum": 0.9, "clip_norm": 0.5}, 0.5)],
)
def test_random_clients_over_rounds_match_the_exact_products_stepped_clipped_and_truncated(agg, clip):
    strategy = _strategy(**agg)
    rng = np.random.default_rng(1)
    flat = _flat(rng.normal(size=(R, N_IN)), np.zeros((N_OUT, R)))
    exact = _product(flat)
    lr, mu = agg.get("global_lr", 1.0), agg.get("momentum", 0.0)
    buf = np.zeros_like(exact)
    for t in range(6):
        clients = [flat + rng.normal(scale=0.3, size=flat.size).astype(np.float32) for _ in range(3)]
        current = _product(flat)
        deltas = [_product(c) - current for c in clients]
        if clip:
            deltas = [d * min(1.0, clip / np.linalg.norm(d)) for d in deltas]
        mean = np.mean(deltas, axis=0)
        if agg.get("outer_optimizer") == "nesterov":  # torch SGD(nesterov=True) on g = -mean
            buf = mu * buf - mean
            exact = exact - lr * (-mean + mu * buf)
        else:
            exact = exact + lr * mean
        flat = _round(strategy, t + 1, flat, clients)

        published = _product(flat)
        u, s, vt = np.linalg.svd(exact)
        best = (u[:, :R] * s[:R]) @ vt[:R]
        assert np.allclose(published, best, atol=1e-4 * np.linalg.norm(exact))
        assert np.linalg.norm(exact - published) == pytest.approx(_tail(exact), rel=1e-3, abs=1e-5)


def test_the_carried_remainder_and_the_outer_state_survive_a_checkpoint():
    rng = np.random.default_rng(2)
    flat = _flat(rng.normal(size=(R, N_IN)), np.zeros((N_OUT, R)))
    rounds = [[flat + rng.normal(scale=0.3, size=flat.size).astype(np.float32) for _ in range(2)] for _ in range(3)]
    agg = {"outer_optimizer": "nesterov", "global_lr": 0.7}

    straight = _strategy(**agg)
    out = flat
    for t, clients in enumerate(rounds):
        out = _round(straight, t + 1, out, [c - flat + out for c in clients])

    first = _strategy(**agg)
    mid = flat
    for t, clients in enumerate(rounds[:2]):
        mid = _round(first, t + 1, mid, [c - flat + mid for c in clients])
    state = first.state_dict()
    assert np.abs(state["residual"]).max() > 0
    resumed = _strategy(**agg)
    resumed.load_state_dict(state)
    resumed_out = _round(resumed, 3, mid, [c - flat + mid for c in rounds[2]])

    assert np.array_equal(resumed_out, out)
