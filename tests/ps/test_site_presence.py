"""A site is present for the other sites' round shares while a client of it calls the PS (a heartbeat at
least), and no longer once none of its clients has been heard from for three heartbeat intervals (45 s at the
default session TTL, less with a shorter one): the last site of a run is then held by nobody's round."""

from __future__ import annotations

import pytest

from geofed.config import FederationConfig, ServerConfig
from ps_server.core import ParameterServerCore, present_for_s


def _core(tmp_path, **server) -> tuple[ParameterServerCore, dict[str, str]]:
    """A PS core with clients a.c0 and a.c1 of site a and b.c0 of site b joined; their sessions."""
    core = ParameterServerCore(
        FederationConfig(), ServerConfig(checkpoint_dir=str(tmp_path), **server), admin_credential="x" * 32
    )
    admin = core.registry.authenticate_admin("x" * 32)
    sessions = {}
    for client, site in (("a.c0", "a"), ("a.c1", "a"), ("b.c0", "b")):
        token, _ = core.mint_token(admin, client, site, 600.0, master=False)
        sessions[client] = core.join(token, client).session
    return core, sessions


def test_a_site_whose_clients_stopped_calling_is_no_longer_present_and_is_again_after_a_heartbeat(tmp_path):
    core, sessions = _core(tmp_path)
    guard = core.aggregator.guard
    silent_s = present_for_s(core.registry.session_ttl_s) + 1

    assert guard.present("a") and guard.present("b")
    assert not guard.present("c")  # a site that never joined
    core.clients["a.c0"].last_seen -= silent_s  # a.c0 silent for longer than three heartbeats
    assert guard.present("a")  # its other client still calls
    core.clients["a.c1"].last_seen -= silent_s
    assert not guard.present("a") and guard.present("b")
    core.heartbeat(sessions["a.c1"], {})
    assert guard.present("a")


@pytest.mark.parametrize(("session_ttl_s", "heartbeat_s"), [(300.0, 15.0), (9.0, 3.0), (60.0, 15.0), (1.5, 1.0)])
def test_presence_lasts_three_of_the_heartbeat_intervals_the_session_ttl_gives(tmp_path, session_ttl_s, heartbeat_s):
    core, _ = _core(tmp_path, session_ttl_s=session_ttl_s)
    guard = core.aggregator.guard

    for client in ("a.c0", "a.c1"):
        core.clients[client].last_seen -= 3 * heartbeat_s - 0.5
    assert guard.present("a")  # a heartbeat may still be on its way
    for client in ("a.c0", "a.c1"):
        core.clients[client].last_seen -= 1.0
    assert not guard.present("a") and guard.present("b")
