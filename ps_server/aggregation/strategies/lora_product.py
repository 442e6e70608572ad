"""LoRA's exact product aggregation: the clients' products BᵢAᵢ averaged exactly, the rank-r remainder carried.

A client's contribution is its product delta Dᵢ = BᵢAᵢ − BA per wrapped layer (dense out × in), where
(A, B) are the round's global adapters and Aᵢ, Bᵢ = A + δAᵢ, B + δBᵢ. The Dᵢ are clipped (their
Frobenius norm over all layers, to `aggregation.clip_norm`), weighted and averaged like any delta, and
the outer optimizer (FedAvg, Nesterov, Adam, with its bounds) steps on the dense mean. The server keeps
the exact global product X = BA + R: R is the part of X the rank-r factors cannot hold. Each round
X ← X + outer(mean Dᵢ), and the published (A, B) are X's best rank-r approximation (truncated SVD,
Eckart–Young); R = X − BA is kept for the next round (server-side error feedback), so nothing the
clients contributed is discarded: BA differs from the exact sum of all rounds' updates by R alone,
which is X's spectral tail and does not accumulate. Memory per wrapped layer, dense out × in: R and
the outer optimizer's state (Nesterov: one buffer, Adam: two; both saved with the checkpoint), and while
a round is open its sum and the round's BA (float64).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...global_model import Snapshot
from ..accumulator import DeltaAccumulator
from ..strategy import Payload


@dataclass(frozen=True)
class AdapterPair:
    """One wrapped layer's A and B in the flat vector."""

    layer: str
    a_off: int
    a_shape: tuple[int, int]  # (r, in)
    b_off: int
    b_shape: tuple[int, int]  # (out, r)

    def factors(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = flat[self.a_off : self.a_off + self.a_shape[0] * self.a_shape[1]].reshape(self.a_shape)
        b = flat[self.b_off : self.b_off + self.b_shape[0] * self.b_shape[1]].reshape(self.b_shape)
        return a, b


def product_numel(pairs: list[AdapterPair]) -> int:
    """Elements of the dense products B·A of every wrapped layer, laid end to end."""
    return sum(p.b_shape[0] * p.a_shape[1] for p in pairs)


def products(pairs: list[AdapterPair], flat: np.ndarray) -> Iterator[tuple[AdapterPair, slice, np.ndarray]]:
    """(pair, its slice of the dense product vector, B·A in float64) for every wrapped layer."""
    off = 0
    for pair in pairs:
        a, b = pair.factors(flat)
        size = pair.b_shape[0] * pair.a_shape[1]
        yield pair, slice(off, off + size), b.astype(np.float64) @ a.astype(np.float64)
        off += size


def refactorise(product: np.ndarray, rank: int, a_rms: float) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) with B·A the best rank-`rank` approximation of `product`; A's rows keep RMS `a_rms`."""
    u, s, vt = np.linalg.svd(product.astype(np.float64), full_matrices=False)
    u, s, vt = u[:, :rank], s[:rank], vt[:rank]
    c = a_rms * np.sqrt(vt.shape[1]) if a_rms > 0 else 1.0  # vt's rows have unit norm
    return (c * vt).astype(np.float32), (u * (s / c)).astype(np.float32)


class ProductRound(DeltaAccumulator):
    """Σ scaleᵢ·Dᵢ over the dense products, with the round's global adapters the Dᵢ are taken against."""

    def __init__(self, pairs: list[AdapterPair], base: np.ndarray) -> None:
        super().__init__(product_numel(pairs))
        self.pairs = pairs
        self.base = base  # the round's global adapters (read-only snapshot)
        self.base_products = np.concatenate([p.reshape(-1) for _, _, p in products(pairs, base)])


@dataclass
class ProductDelta:
    """One client's Dᵢ = BᵢAᵢ − BA (all layers, flat) as a payload the delta averaging folds."""

    client_id: str
    site: str
    values: np.ndarray
    norm: float

    @property
    def numel(self) -> int:
        return self.values.size

    def iter_values(self, max_numel: int):
        yield 0, self.values[:max_numel]


def product_delta(acc: ProductRound, push: Payload) -> ProductDelta:
    """The push's adapter delta δᵢ turned into its product delta against the round's adapters."""
    adapters = np.array(acc.base, dtype=np.float32)
    for off, values in push.iter_values(adapters.size):
        adapters[off : off + values.size] += values
    values = np.empty(acc.numel, dtype=np.float64)
    for _, where, product in products(acc.pairs, adapters):
        values[where] = product.reshape(-1)
    values -= acc.base_products
    norm = float(np.linalg.norm(values))
    return ProductDelta(push.client_id, getattr(push, "site", push.client_id), values.astype(np.float32), norm)


def step_factors(
    pairs: list[AdapterPair], snapshot: Snapshot, increment: np.ndarray, residual: np.ndarray
) -> np.ndarray:
    """The next global adapters: X = BA + R + increment per layer, re-factorised to rank r; R ← X − B'A'
    (in place)."""
    out = np.array(snapshot.flat, dtype=np.float32)
    for pair, where, current in products(pairs, snapshot.flat):
        shape = (pair.b_shape[0], pair.a_shape[1])
        target = current + residual[where].reshape(shape) + increment[where].reshape(shape)
        a, _ = pair.factors(snapshot.flat)
        new_a, new_b = refactorise(target, pair.a_shape[0], float(np.sqrt(np.mean(np.square(a)))))
        oa, ob = pair.factors(out)
        oa[...], ob[...] = new_a, new_b
        residual[where] = (target - new_b.astype(np.float64) @ new_a.astype(np.float64)).reshape(-1)
    return out
