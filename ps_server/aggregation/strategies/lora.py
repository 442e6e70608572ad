"""Federated LoRA (FedIT): the exchanged vector is the adapters A (r × in) and B (out × r) of every layer.

`aggregation: separate` is FedIT's: A and B are averaged on their own like any parameter slice, which is
not the average of the products (mean(BᵢAᵢ) ≠ mean(Bᵢ)·mean(Aᵢ)). `aggregation: product` averages the
products exactly, P = Σ wᵢ BᵢAᵢ / Σ wᵢ (a dense out × in sum per layer, O(wrapped layers) memory), steps
the global product by the outer learning rate, and re-factorises it to rank r by truncated SVD, the best
rank-r approximation (Eckart–Young): never further from the exact mean than separate averaging's B̄Ā.
A keeps its row scale across the re-factorisation, so the clients' next steps on B stay as large.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...global_model import Manifest, Snapshot
from ..rounds import Admission
from ..strategy import Accumulator, Payload, RoundSum
from ..weighting import base_weight
from .delta_averaging import DeltaAveraging


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


def adapter_pairs(manifest: Manifest) -> list[AdapterPair]:
    """Pair every `<layer>.lora_A.*` with its `<layer>.lora_B.*`; ValueError for anything else."""
    offsets, shapes, off = {}, {}, 0
    for t in manifest:
        offsets[t.name], shapes[t.name] = off, tuple(t.shape)
        off += t.numel
    pairs = []
    for name in offsets:
        if ".lora_A." in name:
            layer, rest = name.split(".lora_A.", 1)
            b_name = f"{layer}.lora_B.{rest}"
            if b_name not in offsets:
                raise ValueError(f"adapter {name} has no lora_B partner")
            a_shape, b_shape = shapes[name], shapes[b_name]
            if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[0] != b_shape[1]:
                raise ValueError(f"adapter {layer}: A {list(a_shape)} and B {list(b_shape)} do not share a rank")
            pairs.append(AdapterPair(layer, offsets[name], a_shape, offsets[b_name], b_shape))
        elif ".lora_B." not in name:
            raise ValueError(f"lora exchanges adapters only, but the manifest holds {name}")
    if not pairs:
        raise ValueError("the manifest holds no LoRA adapter")
    return pairs


def refactorise(product: np.ndarray, rank: int, a_rms: float) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) with B·A the best rank-`rank` approximation of `product`; A's rows keep RMS `a_rms`."""
    u, s, vt = np.linalg.svd(product.astype(np.float64), full_matrices=False)
    u, s, vt = u[:, :rank], s[:rank], vt[:rank]
    c = a_rms * np.sqrt(vt.shape[1]) if a_rms > 0 else 1.0  # vt's rows have unit norm
    return (c * vt).astype(np.float32), (u * (s / c)).astype(np.float32)


@dataclass
class ProductAccumulator:
    """Σ wᵢ·BᵢAᵢ per wrapped layer, plus what every accumulator counts."""

    base: np.ndarray  # the round's global adapters (read-only snapshot)
    sums: list[np.ndarray]
    count: int = 0
    weight: float = 0.0
    mass: float = 0.0
    clients: set[str] = field(default_factory=set)

    def close(self) -> None:
        return None


class LoRA(DeltaAveraging):
    name = "lora"

    def __init__(self, fed) -> None:
        super().__init__(fed)
        self.pairs: list[AdapterPair] = []
        if self.product and self.cfg.robust != "none":
            raise ValueError("paradigm.aggregation 'product' averages products exactly; it does not combine with "
                             f"aggregation.robust {self.cfg.robust!r}")

    @property
    def product(self) -> bool:
        return self.fed.paradigm.aggregation == "product"

    def check_manifest(self, manifest: Manifest) -> None:
        adapter_pairs(manifest)

    def install(self, numel: int, manifest: Manifest) -> None:
        super().install(numel, manifest)
        self.pairs = adapter_pairs(manifest)

    def open_round(self, snapshot: Snapshot) -> Accumulator:
        if not self.product:
            return super().open_round(snapshot)
        return ProductAccumulator(snapshot.flat, [np.zeros((p.b_shape[0], p.a_shape[1])) for p in self.pairs])

    def fold(self, acc: Accumulator, push: Payload, admission: Admission, *, num_tokens: int,
             local_steps: int) -> float:
        if not isinstance(acc, ProductAccumulator):
            return super().fold(acc, push, admission, num_tokens=num_tokens, local_steps=local_steps)
        adapters = np.array(acc.base, dtype=np.float32)  # Aᵢ, Bᵢ = global + δᵢ (adapter-sized)
        for off, values in push.iter_values(adapters.size):
            adapters[off : off + values.size] += values
        weight = base_weight(self.cfg, num_tokens, local_steps) * admission.factor
        for total, pair in zip(acc.sums, self.pairs, strict=True):
            a, b = pair.factors(adapters)
            total += weight * (b.astype(np.float64) @ a)
        acc.weight += weight  # a stale product counts less, it is not shrunk towards zero
        acc.count += 1
        acc.clients.add(push.client_id)
        return weight

    def close(self, acc: Accumulator) -> RoundSum:
        if not isinstance(acc, ProductAccumulator):
            return super().close(acc)
        mean = np.concatenate([(s / acc.weight).reshape(-1) for s in acc.sums]).astype(np.float32)
        return RoundSum(mean, acc.count, frozenset(acc.clients), acc.weight)

    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        """Product mode: P ← P + η·(mean BᵢAᵢ − P) per layer, re-factorised to rank r."""
        if not self.product:
            return super().apply(snapshot, round_sum)
        out = np.array(snapshot.flat, dtype=np.float32)
        lr, off = self.cfg.global_lr, 0
        for pair in self.pairs:
            a, b = pair.factors(snapshot.flat)
            size = pair.b_shape[0] * pair.a_shape[1]
            mean = round_sum.delta[off : off + size].reshape(pair.b_shape[0], pair.a_shape[1]).astype(np.float64)
            off += size
            current = b.astype(np.float64) @ a
            target = current + lr * (mean - current)
            new_a, new_b = refactorise(target, pair.a_shape[0], float(np.sqrt(np.mean(np.square(a)))))
            oa, ob = pair.factors(out)
            oa[...], ob[...] = new_a, new_b
        return out
