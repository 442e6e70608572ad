"""A site is present for the other sites' round shares while a client of it calls the PS (a heartbeat at
least), and no longer once none of its clients has been heard from for PRESENT_FOR_S: the last site of a run is
then held by nobody's round."""

from __future__ import annotations

from geofed.config import FederationConfig, ServerConfig
from ps_server.core import PRESENT_FOR_S, ParameterServerCore


def test_a_site_whose_clients_stopped_calling_is_no_longer_present_and_is_again_after_a_heartbeat(tmp_path):
    core = ParameterServerCore(
        FederationConfig(), ServerConfig(checkpoint_dir=str(tmp_path)), admin_credential="x" * 32
    )
    admin = core.registry.authenticate_admin("x" * 32)
    sessions = {}
    for client, site in (("a.c0", "a"), ("a.c1", "a"), ("b.c0", "b")):
        token, _ = core.mint_token(admin, client, site, 600.0, master=False)
        sessions[client] = core.join(token, client).session
    guard = core.aggregator.guard

    assert guard.present("a") and guard.present("b")
    assert not guard.present("c")  # a site that never joined
    core.clients["a.c0"].last_seen -= PRESENT_FOR_S + 1  # a.c0 silent for longer than three heartbeats
    assert guard.present("a")  # its other client still calls
    core.clients["a.c1"].last_seen -= PRESENT_FOR_S + 1
    assert not guard.present("a") and guard.present("b")
    core.heartbeat(sessions["a.c1"], {})
    assert guard.present("a")
