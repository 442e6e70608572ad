"""RAVAN's frozen projections Aᵢ, Bᵢ: orthonormal, as the RAVAN paper's Gram-Schmidt initialisation, drawn
the same way on every machine.

The paper (Raje et al. 2025) freezes Bᵢ and Aᵢ at a random initialisation and recommends the Gram-Schmidt one:
the heads' row spaces of Aᵢ (and column spaces of Bᵢ) orthonormal to each other, so the heads adapt independent
subspaces and Σᵢ sᵢBᵢHᵢAᵢ reaches the highest rank. Each row of Aᵢ and each column of Bᵢ is then a unit
vector, and one step on Hᵢ moves the layer by about what one step on LoRA's B does at the same rate. Where
heads × rank exceeds a dimension (more directions than the space has), the heads are orthonormal in groups of
as many whole heads as fit, each group its own draw.

numpy's counter-based Philox generator, keyed by (paradigm.seed, the layer's index among the wrapped
layers), draws the standard normals with the same code on every CPU (torch's CPU `randn` takes a vectorised
path that depends on the instruction set it dispatches to, so two machines can draw different bits from one
seed). Gram-Schmidt runs in float64 and the result is rounded once to float32; the frozen digest each client
declares at Join covers these buffers, so a machine that rounded differently is refused, never averaged.
"""

from __future__ import annotations

import numpy as np


def _orthonormal_rows(draws: np.ndarray) -> np.ndarray:
    """Gram-Schmidt (classical, each vector twice) on the rows of `draws` (m × n, m ≤ n), in order."""
    q = np.zeros_like(draws)
    for j in range(draws.shape[0]):
        v = draws[j]
        for _ in range(2):
            v = v - q[:j].T @ (q[:j] @ v)
        q[j] = v / np.sqrt(v @ v)
    return q


def _heads(gen: np.random.Generator, heads: int, rank: int, dim: int) -> np.ndarray:
    """heads × rank unit vectors of length `dim`, orthonormal within each group of ⌊dim / rank⌋ whole heads."""
    if rank > dim:
        raise ValueError(f"rank {rank} exceeds the dimension {dim}: a head's vectors cannot be orthonormal")
    draws = gen.standard_normal((heads * rank, dim))  # float64
    group = (dim // rank) * rank
    return np.concatenate([_orthonormal_rows(draws[i:i + group]) for i in range(0, heads * rank, group)])


def projections(seed: int, layer: int, heads: int, rank: int, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(A: heads × rank × in, orthonormal rows; B: heads × out × rank, orthonormal columns), float32."""
    if seed < 0 or layer < 0:
        raise ValueError(f"projection key out of range: seed {seed}, layer {layer}")
    gen = np.random.Generator(np.random.Philox(key=np.array([seed, layer], dtype=np.uint64)))
    a = _heads(gen, heads, rank, n_in).reshape(heads, rank, n_in)
    b = _heads(gen, heads, rank, n_out).reshape(heads, rank, n_out).transpose(0, 2, 1)
    return np.ascontiguousarray(a, dtype=np.float32), np.ascontiguousarray(b, dtype=np.float32)
