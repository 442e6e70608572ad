"""A PS rule geofed does not ship, declared once: every delta of a client id that matches the shell pattern in
`GEOFED_REFUSED_CLIENTS` (none, when it is unset) is refused, reason `refused_client`.

`GEOFED_PLUGINS=tests.plugins.refuse_clients` makes it a rule every PS of a federation runs (`geofed.plugins`),
after the built-in ones.
"""

from __future__ import annotations

import fnmatch
import os

from ps_server.aggregation.rules import PASS, Delta, Guard, Rule, Verdict

PATTERN = "GEOFED_REFUSED_CLIENTS"


class RefuseClients(Rule):
    """Refuses the deltas of the client ids `GEOFED_REFUSED_CLIENTS` matches, whatever they hold."""

    name = "refuse_clients"

    def __init__(self) -> None:
        self.pattern = os.environ.get(PATTERN, "")

    def check(self, delta: Delta, guard: Guard) -> Verdict:
        client_id = delta.push.client_id
        if self.pattern and fnmatch.fnmatchcase(client_id, self.pattern):
            return Verdict(reason="refused_client", message=f"client {client_id!r} matches {self.pattern!r}")
        return PASS
