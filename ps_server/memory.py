"""Keep the PS's resident memory close to what it really holds.

Decoding a push allocates tens of MB of short-lived numpy scratch per frame on gRPC worker threads.
glibc would serve those from per-thread arenas and, after its adaptive mmap threshold has grown, keep
the freed memory: RSS then scales with the number of threads that ever decoded. A fixed mmap threshold
hands every large buffer straight back to the OS on free, and a small arena count bounds the rest.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("geofed.ps")

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def tune_allocator(mmap_threshold: int = 1 << 20, arena_max: int = 2) -> bool:
    """Apply the glibc settings above (a no-op returning False on other C libraries)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_ARENA_MAX, arena_max))
    log.info("event=allocator_tuned ok=%s mmap_threshold=%d arena_max=%d", ok, mmap_threshold, arena_max)
    return ok
