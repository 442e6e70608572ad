"""Which Huffman lane coder runs: C (built by `pip install`), else numba, else numpy; all write the same bytes.

`GEOFED_HUFFMAN` forces one (`c`, `numba` or `numpy`; empty or `auto`: the fastest present). Forcing a coder
that is not present is an error rather than a silent fallback, so a benchmark or test never measures the
wrong one.
"""

from __future__ import annotations

import os

from geofed.codec import huffman_c, huffman_jit
from geofed.codec.errors import CodecError

CODERS = ("c", "numba", "numpy")


def available() -> list[str]:
    """The coders present on this machine, fastest first."""
    return [c for c, ok in zip(CODERS, (huffman_c.built(), huffman_jit._NUMBA, True), strict=True) if ok]


def backend() -> str:
    """The coder in use: `GEOFED_HUFFMAN` if set, else the first of `available()`."""
    want = os.environ.get("GEOFED_HUFFMAN", "").strip().lower()
    have = available()
    if want in ("", "auto"):
        return have[0]
    if want not in CODERS:
        raise CodecError(f"GEOFED_HUFFMAN={want!r}: expected one of {', '.join(CODERS)} or auto")
    if want not in have:
        raise CodecError(f"GEOFED_HUFFMAN={want}: that Huffman coder is not present here (present: {', '.join(have)})")
    return want
