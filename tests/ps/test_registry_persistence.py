"""The PS core under concurrent Joins and admin calls: the registry on disk, and who counts as active."""

from __future__ import annotations

import json
import threading

from geofed.config import FederationConfig, ServerConfig
from ps_server.core import ParameterServerCore


def test_concurrent_token_mints_all_reach_the_registry_file(tmp_path) -> None:
    """16 threads mint tokens at once: no write fails, and the file on disk holds every token.

    With one fixed temporary file and no lock, concurrent writers truncated and renamed each other's file
    (`registry_save_failed ... .registry.json.tmp`), and a slow writer could replace a newer registry with
    an older snapshot: a token minted then would be unknown to a restarted PS.
    """
    server = ServerConfig(checkpoint_dir=str(tmp_path / "ckpt"))
    core = ParameterServerCore(FederationConfig(), server, admin_credential="x" * 32)
    admin = core.registry.authenticate_admin("x" * 32)
    failures_before = core.metrics.checkpoint_failures._value.get()
    start = threading.Barrier(16)

    def mint(i: int) -> None:
        start.wait()
        for j in range(5):
            core.mint_token(admin, f"client-{i}-{j}", "site", 600.0, master=False)

    threads = [threading.Thread(target=mint, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.metrics.checkpoint_failures._value.get() == failures_before
    on_disk = json.loads((tmp_path / "ckpt" / "registry.json").read_text())
    assert on_disk == json.loads(json.dumps(core.registry.state_dict()))
    assert sum(1 for _ in (tmp_path / "ckpt").glob(".registry*")) == 0  # no temporary file left behind


def test_status_counts_clients_with_a_live_session_as_active_without_an_open_stream(tmp_path) -> None:
    """Clients fetch the model on demand, so between syncs none holds a stream: `active_clients` counts the
    sites with a live session seen within client_timeout_s (one site once, however many client ids); a revoked
    client drops out of it at once."""
    server = ServerConfig(checkpoint_dir=str(tmp_path / "ckpt"), client_timeout_s=60.0)
    core = ParameterServerCore(FederationConfig(), server, admin_credential="x" * 32)
    admin = core.registry.authenticate_admin("x" * 32)
    for name, site in (("a", "site-a"), ("b", "site-b"), ("c", "site-c"), ("c2", "site-c")):
        token, _ = core.mint_token(admin, name, site, 600.0, master=False)
        core.join(token, name)
    status = core.status()
    assert (status["active_clients"], status["connected_clients"], status["known_clients"]) == (3, 0, 4)
    core.registry.revoke_client(admin, "b")
    assert core.status()["active_clients"] == 2
