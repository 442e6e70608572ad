"""Federated LoRA (FedIT): the exchanged vector is the adapters A (r × in) and B (out × r) of every layer.

`aggregation: separate` is FedIT's: A and B are averaged on their own like any parameter slice, which is
not the average of the products (mean(BᵢAᵢ) ≠ mean(Bᵢ)·mean(Aᵢ)). `aggregation: product` averages the
products exactly and carries what rank r cannot hold to the next round (lora_product.py).
"""

from __future__ import annotations

import numpy as np

from ...global_model import Manifest, Snapshot
from ..rounds import Admission
from ..strategy import Accumulator, Payload, RoundSum
from .delta_averaging import DeltaAveraging
from .lora_product import AdapterPair, ProductRound, product_delta, product_numel, step_factors


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


class LoRA(DeltaAveraging):
    """The adapters averaged on their own (FedIT) or as their products BA (`paradigm.aggregation`)."""

    def __init__(self, fed) -> None:
        super().__init__(fed)
        self.pairs: list[AdapterPair] = []
        self.residual = np.zeros(0, dtype=np.float32)
        if self.product and self.cfg.robust != "none":
            raise ValueError(
                "paradigm.aggregation 'product' averages products exactly; it does not combine with "
                f"aggregation.robust {self.cfg.robust!r}"
            )

    @property
    def product(self) -> bool:
        return self.fed.paradigm.aggregation == "product"

    def check_manifest(self, manifest: Manifest) -> None:
        adapter_pairs(manifest)

    def install(self, numel: int, manifest: Manifest) -> None:
        self.pairs = adapter_pairs(manifest)
        if not self.product:
            super().install(numel, manifest)
            return
        dense = product_numel(self.pairs)
        super().install(dense, manifest)  # the outer optimizer steps on the dense products
        self.residual = np.zeros(dense, dtype=np.float32)

    def round_numel(self, snapshot: Snapshot) -> int:
        return product_numel(self.pairs) if self.product else super().round_numel(snapshot)

    def open_round(self, snapshot: Snapshot) -> Accumulator:
        if not self.product:
            return super().open_round(snapshot)
        return ProductRound(self.pairs, snapshot.flat)

    def fold(
        self, acc: Accumulator, push: Payload, admission: Admission, *, num_tokens: int, local_steps: int
    ) -> float:
        if isinstance(acc, ProductRound):
            push = product_delta(acc, push)  # clipped, weighted and summed as a delta of the products
        return super().fold(acc, push, admission, num_tokens=num_tokens, local_steps=local_steps)

    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        """Product mode: X ← BA + R + outer(mean Dᵢ) per layer, re-factorised to rank r, R ← X − B'A'."""
        if not self.product:
            return super().apply(snapshot, round_sum)
        update = round_sum.delta
        self.outer_step_(update)
        return step_factors(self.pairs, snapshot, update, self.residual)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.product and state:
            state["residual"] = self.residual
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        residual = state.get("residual")
        if self.product and residual is not None and np.asarray(residual).size == self.residual.size:
            self.residual = np.asarray(residual, dtype=np.float32).copy()
