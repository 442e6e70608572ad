"""User-space WAN emulation (latency, jitter, asymmetric rate caps, outages) for tests and benchmarks.

Names resolve lazily, so `import geofed_apps.wan.cli` (done by `geofed --help`) pulls in neither
pydantic nor asyncio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geofed_apps.wan.profile import LinkProfile, Outage, parse_outage, parse_rate
    from geofed_apps.wan.proxy import WanProxy, WanStats

_EXPORTS = {
    "LinkProfile": "geofed_apps.wan.profile",
    "Outage": "geofed_apps.wan.profile",
    "parse_outage": "geofed_apps.wan.profile",
    "parse_rate": "geofed_apps.wan.profile",
    "WanProxy": "geofed_apps.wan.proxy",
    "WanStats": "geofed_apps.wan.proxy",
}
__all__ = ["LinkProfile", "Outage", "WanProxy", "WanStats", "parse_outage", "parse_rate"]


def __getattr__(name: str) -> Any:
    """Import the defining module on first use of one of `__all__`."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'geofed_apps.wan' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
