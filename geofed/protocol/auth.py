"""Credentials as call metadata: `authorization: Bearer <session>` or `Admin <credential>`."""

from __future__ import annotations

from collections.abc import Iterable

AUTH_KEY = "authorization"


def bearer(session: str) -> tuple[tuple[str, str]]:
    """Metadata carrying a client session."""
    return ((AUTH_KEY, f"Bearer {session}"),)


def admin(credential: str) -> tuple[tuple[str, str]]:
    """Metadata carrying an admin or site credential."""
    return ((AUTH_KEY, f"Admin {credential}"),)


def credential_from(metadata: Iterable[tuple[str, str | bytes]] | None, scheme: str) -> str | None:
    """Extract the credential of `scheme` ('Bearer' or 'Admin') from invocation metadata."""
    for key, value in metadata or ():
        if key == AUTH_KEY and isinstance(value, str) and value.startswith(scheme + " "):
            return value[len(scheme) + 1 :].strip() or None
    return None
