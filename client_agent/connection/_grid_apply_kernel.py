"""numba kernel of `grid_apply.decode`; imported on first use only (numba's import and cache load cost ~0.3 s)."""

from __future__ import annotations

import numpy as np

from geofed.codec.numba_jit import cached_njit


@cached_njit(nogil=True, boundscheck=False)
def apply_levels(have, levels, exps, block, limit, out):  # pragma: no cover - compiled
    """out[i] = have[i] + float32(unzigzag(z[i])) · 2^exps[i // block], z[i] read from the 7-bit `levels`.

    Value i takes its low 7 bits from the next unread symbol of levels[0]; while bit 7 is set, its next 7 bits
    are the next unread symbol of the following level (model_delta's layout). Returns 1 (nothing reliable in
    `out`) when a value reaches `limit` or a level runs short, else 0.
    """
    n = have.size
    nblocks = (n + block - 1) // block
    depth = len(levels)
    cursor = np.zeros(depth, dtype=np.int64)
    for b in range(nblocks):
        scale = np.float32(2.0 ** np.float64(exps[b]))
        hi = min(n, (b + 1) * block)
        for i in range(b * block, hi):
            v = np.int64(0)
            k = 0
            s = np.int64(128)
            while s >= 128:
                if k == depth or cursor[k] >= levels[k].size:
                    return 1
                s = np.int64(levels[k][cursor[k]])
                cursor[k] += 1
                v |= (s & 127) << (7 * k)
                k += 1
            if v >= limit:
                return 1
            d = (v >> 1) ^ -(v & 1)
            out[i] = have[i] + np.float32(d) * scale
    return 0


@cached_njit(nogil=True, boundscheck=False)
def count_continued(syms):  # pragma: no cover - compiled
    """How many symbols have bit 7 set (values that continue in the next level), without numpy's bool temporary."""
    c = 0
    for i in range(syms.size):
        c += syms[i] >> 7
    return c
