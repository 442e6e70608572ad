"""User-space WAN emulation (latency, jitter, asymmetric rate caps, outages) for tests and benchmarks.

Names resolve lazily, so `import geofed.wan.cli` (done by `geofed --help`) pulls in neither
pydantic nor asyncio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geofed.wan.profile import LinkProfile, Outage, parse_outage, parse_rate
    from geofed.wan.proxy import WanProxy, WanStats

_EXPORTS = {
    "LinkProfile": "geofed.wan.profile",
    "Outage": "geofed.wan.profile",
    "parse_outage": "geofed.wan.profile",
    "parse_rate": "geofed.wan.profile",
    "WanProxy": "geofed.wan.proxy",
    "WanStats": "geofed.wan.proxy",
}
__all__ = ["LinkProfile", "Outage", "WanProxy", "WanStats", "parse_outage", "parse_rate"]


def __getattr__(name: str) -> Any:
    """Import the defining module on first use of one of `__all__`."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'geofed.wan' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
