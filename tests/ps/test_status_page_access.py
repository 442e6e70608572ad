"""Who may read the status page and which queries it takes (pure functions of `access.py`)."""

from __future__ import annotations

import base64

import pytest

from ps_server.status_page.access import (
    Query,
    Refusal,
    check_host,
    credential_from_header,
    is_loopback,
    parse_query,
    scope_site,
)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(("header", "credential"), [
    (None, None),
    ("Bearer abc", "abc"),
    ("bearer  abc ", "abc"),
    (_basic("admin", "s3cret"), "s3cret"),
    (_basic("s3cret", ""), "s3cret"),  # curl -u CREDENTIAL: puts it in the user name
    (_basic("", ""), None),
])
def test_credential_from_header(header, credential):
    assert credential_from_header(header) == credential


@pytest.mark.parametrize("header", ["Basic !!!", "Digest x", "Bearer", "Basic " + base64.b64encode(b"\xff:x").decode()])
def test_a_malformed_authorization_header_is_400(header):
    with pytest.raises(Refusal) as exc:
        credential_from_header(header)
    assert exc.value.status == 400


@pytest.mark.parametrize(("raw", "query"), [
    ("", Query()),
    ("since=0", Query()),
    ("since=12", Query(since=12)),
    ("site=east&since=3", Query(since=3, site="east")),
    ("site=a.b_c-d", Query(site="a.b_c-d")),
])
def test_well_formed_queries(raw, query):
    assert parse_query(raw) == query


@pytest.mark.parametrize("raw", [
    "since=-1", "since=1.5", "since=", "since", "since=１", "since=99999999999999999999", "since=1&since=2",
    "x=1", "site=", "site=a b", "site=../x", "a=1&b=2&c=3&d=4&e=5", "&&",
])
def test_malformed_queries_are_400(raw):
    with pytest.raises(Refusal) as exc:
        parse_query(raw)
    assert exc.value.status == 400


def test_a_site_sees_its_own_site_only_and_the_admin_any():
    assert scope_site(None, Query()) is None
    assert scope_site(None, Query(site="east")) == "east"
    assert scope_site("west", Query()) == "west"
    assert scope_site("west", Query(site="west")) == "west"
    with pytest.raises(Refusal) as exc:
        scope_site("west", Query(site="east"))
    assert exc.value.status == 403


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("10.0.0.5", False), ("example.org", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_without_a_credential_only_local_host_names_are_answered():
    check_host("localhost:9091", 9091)
    check_host("127.0.0.1:9091", 9091)
    for bad in (None, "evil.example:9091", "localhost:80", "localhost"):
        with pytest.raises(Refusal):
            check_host(bad, 9091)
