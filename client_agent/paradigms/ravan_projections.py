"""RAVAN's frozen projections Aᵢ, Bᵢ, drawn bit-identically on every machine.

numpy's counter-based Philox generator, keyed by (paradigm.seed, the layer's index among the wrapped
layers), draws float32 standard normals with the same code on every CPU (torch's CPU `randn` takes a
vectorised path that depends on the instruction set it dispatches to, so two machines can draw
different bits from one seed). The scale divisions are single float32 operations, exact under IEEE 754.
"""

from __future__ import annotations

import math

import numpy as np


def projections(seed: int, layer: int, heads: int, rank: int, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(A: heads × rank × in, scaled 1/√in; B: heads × out × rank, scaled 1/√rank), float32."""
    if seed < 0 or layer < 0:
        raise ValueError(f"projection key out of range: seed {seed}, layer {layer}")
    gen = np.random.Generator(np.random.Philox(key=np.array([seed, layer], dtype=np.uint64)))
    a = gen.standard_normal((heads, rank, n_in), dtype=np.float32) / np.float32(math.sqrt(n_in))
    b = gen.standard_normal((heads, n_out, rank), dtype=np.float32) / np.float32(math.sqrt(rank))
    return a, b
