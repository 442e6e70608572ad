"""Who installs Θ0 on Kubernetes: the client the Federation names (spec.server.masterClientID).

The PS has no torch, so it cannot build the initial model itself; the master client builds it and
streams it (Fig. 1 steps 1-2). The federation admin names that client; its site's credential may then
mint it a master token, and no other site can claim the role. Clients that wait for a model that
never comes give up with a reason the operator shows in the SiteClient's status.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from geofed.protocol.admin_client import AdminClient, AdminError
from geofed_operator.attempts import Outcome, classify_attempt
from ps_server.registry import AuthError, Principal, Registry

from .conftest import running_ps

ADMIN = "admin-credential-0123456789"


@pytest.mark.parametrize(
    ("named", "client_id", "master", "allowed"),
    [
        ("uw.gpu0", "uw.gpu0", True, True),  # the named master, minted by its own site
        ("uw.gpu0", "uw.gpu1", True, False),  # another client of the same site
        (None, "uw.gpu0", True, False),  # the federation names no master
        ("uw.gpu0", "uw.gpu1", False, True),  # an ordinary token
    ],
)
def test_a_site_mints_a_master_token_only_for_the_named_client(named, client_id, master, allowed) -> None:
    """The site credential may mint a master token exactly for masterClientID."""
    # Prepare
    registry = Registry(ADMIN, master_client_id=named)
    site = Principal(site="uw")
    # Execute / Assert
    if allowed:
        token, _ = registry.mint_token(site, client_id, "uw", 60, master=master)
        _, session, _ = registry.join(token, client_id)
        assert session.master is (client_id == named)
    else:
        with pytest.raises(AuthError, match="masterClientID") as denied:
            registry.mint_token(site, client_id, "uw", 60, master=master)
        assert denied.value.permission


def test_every_token_for_the_named_master_is_a_master_token() -> None:
    """The SiteClient of the master needs no flag: the Federation's naming is enough."""
    registry = Registry(ADMIN, master_client_id="uw.gpu0")
    token, _ = registry.mint_token(Principal(site="uw"), "uw.gpu0", "uw", 60)
    assert registry.join(token, "uw.gpu0")[1].master
    admin_token, _ = registry.mint_token(Principal(site=None), "mit.gpu0", "mit", 60, master=True)
    assert registry.join(admin_token, "mit.gpu0")[1].master  # the admin may always


def test_the_ps_flag_lets_the_named_site_mint_the_master_token(tmp_path: Path) -> None:
    """`geofed ps --master-client-id` (the Federation's spec.server.masterClientID) over the admin API."""
    with running_ps(tmp_path, "--master-client-id", "uw.gpu0") as (address, admin_credential):
        with AdminClient(address, admin_credential, insecure=True) as admin:
            credential = admin.create_site_credential("uw")
        with AdminClient(address, credential, insecure=True) as site:
            assert site.create_token("uw.gpu0", "uw", 60, True)[0]
            with pytest.raises(AdminError) as denied:
                site.create_token("uw.gpu1", "uw", 60, True)
        assert denied.value.code == "PERMISSION_DENIED" and "uw.gpu0" in denied.value.details


def test_a_client_without_a_master_gives_up_with_a_reason_the_operator_shows(tmp_path: Path) -> None:
    """No master ever installs Θ0: the client exits 3 saying so; the pod's failure carries that reason."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("some private text for the client to train on. " * 400)
    with running_ps(tmp_path) as (address, admin_credential):
        with AdminClient(address, admin_credential, insecure=True) as admin:
            token, _ = admin.create_token("uw.gpu1", "uw", 600)
        (tmp_path / "token").write_text(token)
        cmd = [
            sys.executable, "-m", "geofed_apps", "client", "--ps", address, "--client-id", "uw.gpu1",
            "--token-file", str(tmp_path / "token"), "--data", str(data), "--work-dir", str(tmp_path / "work"),
            "--insecure", "--model-wait-timeout-s", "1",
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "NoGlobalModel:" in done.stderr.strip().splitlines()[-1]

    # What the kubelet makes of it (terminationMessagePolicy: FallbackToLogsOnError) and the operator reads.
    pod = {
        "metadata": {"name": "gpu1-1-abcde"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "client", "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": done.stderr}}}
            ],
        },
    }
    attempt = classify_attempt({"status": {}}, [pod])
    assert (attempt.outcome, attempt.reason) == (Outcome.FAILED, "NoGlobalModel")
    assert "masterClientID" in attempt.message
