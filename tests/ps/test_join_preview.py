"""A Join preview answers what a Join would (federation, version, master) and leaves the token unused."""

from __future__ import annotations

import pytest

from geofed.config import FederationConfig, ServerConfig
from ps_server.core import ParameterServerCore
from ps_server.registry import AuthError


def _core(tmp_path) -> tuple[ParameterServerCore, str]:
    core = ParameterServerCore(
        FederationConfig(), ServerConfig(checkpoint_dir=str(tmp_path)), admin_credential="x" * 32
    )
    admin = core.registry.authenticate_admin("x" * 32)
    token, _ = core.mint_token(admin, "s.c0", "s", 600.0, master=True)
    return core, token


def test_a_preview_spends_nothing_and_the_join_after_it_succeeds(tmp_path):
    core, token = _core(tmp_path)

    first = core.preview(token, "s.c0")
    second = core.preview(token, "s.c0")
    joined = core.join(token, "s.c0")

    assert (first.master, first.version, first.session, first.rejoin_token) == (True, 0, "", "")
    assert (second.master, second.version) == (True, 0)
    assert joined.master and joined.session and joined.rejoin_token
    with pytest.raises(AuthError, match="unknown or already used"):
        core.preview(token, "s.c0")  # the Join spent it
    assert core.preview(joined.rejoin_token, "s.c0").session == ""


@pytest.mark.parametrize(
    ("client_id", "token", "fragment"),
    [("s.other", None, "minted for another client id, not 's.other'"), ("s.c0", "forged", "unknown or already used")],
)
def test_a_preview_refuses_what_a_join_refuses(tmp_path, client_id, token, fragment):
    core, real = _core(tmp_path)

    with pytest.raises(AuthError, match=fragment):
        core.preview(token or real, client_id)

    assert core.join(real, "s.c0").session  # the refused preview left the token usable
