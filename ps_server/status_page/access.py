"""Who may read the status page, and which queries it takes: pure functions over header and query text.

Like the admin API: the admin credential sees everything, a site credential its own clients. Sent as HTTP
Basic (any user name, the credential as password: what a browser's login prompt sends) or `Bearer`.
A page bound to a loopback address with `status_auth: auto` lets local users in without one. Refusals
say what is wrong with the request and nothing about the federation: 401 no credential, 403 a credential
the PS does not know (or a site asking for another site), 400 a malformed header, Host or query.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import parse_qs

_SITE = re.compile(r"[A-Za-z0-9._-]{1,253}")
_MAX_SINCE = 1 << 62
_LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")


class Refusal(Exception):
    """An HTTP error answer: status code and a one-line reason (safe to show anyone)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Query:
    """`/api/status?since=N&site=S`: history after version N; the admin may narrow to one site."""

    since: int = 0
    site: str | None = None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def credential_from_header(value: str | None) -> str | None:
    """The credential in an Authorization header (Basic: the password, or the user name when empty)."""
    if value is None:
        return None
    scheme, _, rest = value.strip().partition(" ")
    rest = rest.strip()
    if scheme.lower() == "bearer" and rest:
        return rest
    if scheme.lower() == "basic" and rest:
        try:
            user, _, password = base64.b64decode(rest, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Refusal(400, "malformed Authorization header") from None
        return (password or user) or None
    raise Refusal(400, "malformed Authorization header: use Basic or Bearer")


def check_host(host_header: str | None, port: int) -> None:
    """Without a credential, only a loopback Host is served (a DNS-rebinding page cannot read it)."""
    allowed = {f"{name}:{port}" for name in _LOCAL_NAMES}
    if (host_header or "").lower() not in allowed:
        raise Refusal(400, "this page answers requests addressed to localhost only")


def parse_query(raw: str) -> Query:
    """Parse the query string strictly: known keys, once each, well-formed values; else 400."""
    if not raw:
        return Query()
    try:
        fields = parse_qs(raw, keep_blank_values=True, strict_parsing=True, max_num_fields=4)
    except ValueError:
        raise Refusal(400, "malformed query string") from None
    unknown = set(fields) - {"since", "site"}
    if unknown:
        raise Refusal(400, f"unknown query parameter(s): {', '.join(sorted(unknown))[:80]}")
    if any(len(v) != 1 for v in fields.values()):
        raise Refusal(400, "each query parameter may be given once")
    since, site = fields.get("since", ["0"])[0], fields.get("site", [None])[0]
    if not since.isdigit() or not since.isascii() or int(since) > _MAX_SINCE:
        raise Refusal(400, "since must be a version number (a non-negative integer)")
    if site is not None and not _SITE.fullmatch(site):
        raise Refusal(400, "site must be 1..253 letters, digits, '.', '_' or '-'")
    return Query(int(since), site)


def scope_site(principal_site: str | None, query: Query) -> str | None:
    """The site whose clients to show (None: all); a site may not ask for another."""
    if principal_site is None:
        return query.site
    if query.site is not None and query.site != principal_site:
        raise Refusal(403, "a site credential sees its own site only")
    return principal_site
