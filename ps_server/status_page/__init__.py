"""The PS's built-in status page: federation, loss over time, clients, contributions, refusals.

`start_status_page(core, cfg)` serves it on `cfg.status_port` (0: off) and returns the running page, or
None. See `server.py` for why it has its own port, `access.py` for who may read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from geofed.config import ServerConfig

    from ..core import ParameterServerCore
    from .server import StatusPage


def start_status_page(core: ParameterServerCore, cfg: ServerConfig) -> StatusPage | None:
    """Bind and start the page (OSError when the port is taken); None when `status_port` is 0."""
    if not cfg.status_port:
        return None
    from .server import StatusPage

    page = StatusPage(core, cfg.status_host, cfg.status_port, require_credential=cfg.status_auth == "credential")
    return page.start()
