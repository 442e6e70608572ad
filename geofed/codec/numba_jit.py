"""`cached_njit`: numba's `njit` with an on-disk cache where numba finds a writable place for one.

numba looks for a cache directory in `NUMBA_CACHE_DIR`, then next to the source file (`__pycache__`), then
in the user's cache directory. With a read-only root filesystem and no writable `NUMBA_CACHE_DIR` none is
writable, and `njit(cache=True)` raises at decoration, so the kernel module cannot be imported. Here such a
function is compiled without a cache instead (on every process start, a second or so per kernel module),
and one warning per process names `NUMBA_CACHE_DIR` as the remedy. Imported only by the kernel modules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from numba import njit

log = logging.getLogger(__name__)
_warned = False


def _warn_once(exc: RuntimeError) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "no writable numba cache location (%s); compiling without an on-disk cache: set NUMBA_CACHE_DIR "
            "to a writable directory to keep compiled kernels between process starts",
            exc,
        )


def cached_njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`numba.njit(cache=True, **options)`, or `numba.njit(**options)` when no cache location is writable."""

    def decorate(fn: Callable[..., Any]) -> Any:
        try:
            return njit(cache=True, **options)(fn)
        except RuntimeError as exc:
            if "no locator available" not in str(exc):
                raise
            _warn_once(exc)
            return njit(**options)(fn)

    return decorate
