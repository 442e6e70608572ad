"""A client's state on the status page, from what the PS observed (pure)."""

from __future__ import annotations

import pytest

from ps_server.core import ClientState
from ps_server.status_page.view import client_state

NOW = 1_000_000.0


def _client(*, seen_ago: float = 1.0, push_started_ago: float | None = None, push_done: bool = False) -> ClientState:
    c = ClientState("s.a", "s", last_seen=NOW - seen_ago)
    if push_started_ago is not None:
        c.push_started = NOW - push_started_ago
        c.push_finished = NOW - push_started_ago / 2 if push_done else 0.0
    return c


@pytest.mark.parametrize(("client", "live", "waiting", "state"), [
    (_client(), True, False, "training"),
    (_client(), True, True, "waiting"),
    (_client(push_started_ago=5.0), True, False, "pushing"),
    (_client(push_started_ago=5.0, push_done=True), True, False, "training"),
    (_client(push_started_ago=500.0), True, False, "training"),  # an upload abandoned long ago is not "pushing"
    (_client(), False, False, "gone"),  # no live session
    (_client(seen_ago=500.0), True, True, "gone"),  # silent for longer than client_timeout_s
])
def test_client_state(client, live, waiting, state):
    assert client_state(client, live=live, waiting=waiting, now=NOW, timeout_s=180.0) == state
