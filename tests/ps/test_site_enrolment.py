"""Site credentials: a second enrolment of a site never replaces its credential unless rotation is asked for."""

from __future__ import annotations

import pytest

from ps_server.registry import AuthError, Principal, Registry, SiteExists

ADMIN = Principal(site=None)


def test_enrolling_an_enrolled_site_again_is_refused_and_keeps_its_credential() -> None:
    registry = Registry("admin-credential-0123456789")
    first = registry.create_site(ADMIN, "uw")
    with pytest.raises(SiteExists, match=r"'uw' is already enrolled.*--rotate"):
        registry.create_site(ADMIN, "uw")  # no client has joined yet: still refused
    assert registry.authenticate_admin(first) == Principal(site="uw")  # the site's SiteClients keep minting


def test_rotation_asked_for_replaces_the_credential() -> None:
    registry = Registry("admin-credential-0123456789")
    first = registry.create_site(ADMIN, "uw")
    second = registry.create_site(ADMIN, "uw", rotate=True)
    assert second != first and registry.authenticate_admin(second) == Principal(site="uw")
    with pytest.raises(AuthError):
        registry.authenticate_admin(first)


def test_a_revoked_site_may_be_enrolled_again_without_rotate() -> None:
    registry = Registry("admin-credential-0123456789")
    registry.create_site(ADMIN, "uw")
    registry.revoke_site(ADMIN, "uw")
    assert registry.authenticate_admin(registry.create_site(ADMIN, "uw")) == Principal(site="uw")
