"""The operator's side of the PS admin API: opening clients and turning failures into status text.

An unreachable PS, a revoked credential or a missing Secret must show up as a Degraded condition
with a message a person can act on, never as a crash loop.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol


class AdminAPI(Protocol):
    """What the operator uses of `geofed.protocol.admin_client.AdminClient` (fakes in tests match it)."""

    def __enter__(self) -> AdminAPI: ...
    def __exit__(self, *exc: object) -> None: ...
    def create_token(
        self, client_id: str, site: str = "", ttl_s: float = 0.0, master: bool = False
    ) -> tuple[str, float]: ...
    def revoke_client(self, client_id: str, token: str = "") -> tuple[int, int]: ...
    def status(self) -> dict[str, Any]: ...
    def list_clients(self) -> list[dict[str, Any]]: ...


AdminFactory = Callable[..., AdminAPI]


def open_admin(
    address: str,
    credential: str,
    *,
    insecure: bool = False,
    ca_cert: bytes | None = None,
    timeout_s: float = 10.0,
    server_name: str | None = None,
) -> AdminAPI:
    """A real `AdminClient` (imported here so the operator's pure modules never pull in gRPC)."""
    from geofed.protocol.admin_client import AdminClient

    return AdminClient(
        address, credential, insecure=insecure, ca_cert=ca_cert, timeout_s=timeout_s, server_name=server_name
    )


_REASONS = {
    "UNAVAILABLE": "PSUnreachable",
    "DEADLINE_EXCEEDED": "PSUnreachable",
    "UNAUTHENTICATED": "CredentialRejected",
    "PERMISSION_DENIED": "PermissionDenied",
}
_HINTS = {
    "PSUnreachable": "check the address, the PS's Service/LoadBalancer and the firewall; retrying",
    "CredentialRejected": "the credential was revoked or belongs to another federation; re-enroll the site",
    "PermissionDenied": "a site credential may only mint tokens for its own site's clients, and a master "
    "token only for the client the Federation names in spec.server.masterClientID",
    "TLSNameMismatch": "the PS certificate does not cover the address dialled: add the load balancer's DNS name "
    "or IP to the Federation's spec.tls.dnsNames / ipAddresses (or serve spec.tlsSecretName with it)",
    "TLSUntrusted": "the PS certificate is not signed by the CA given (caSecretRef / --ca): copy ca.crt from "
    "the Federation's TLS Secret again",
}
# Substrings of gRPC's UNAVAILABLE details that mean TLS, not the network, is at fault (when gRPC says so).
_TLS_NAME = ("peer name", "hostname mismatch", "not in peer certificate", "subject alt", "ip address mismatch")
_TLS_TRUST = ("certificate verify failed", "ssl_error", "handshake failed", "unable to get local issuer")


def diagnose_tls(address: str, ca_cert: bytes | None, server_name: str | None, timeout_s: float = 5.0) -> str | None:
    """Why a TLS connection to `address` fails: TLSNameMismatch, TLSUntrusted, or None (TCP down, or fine).

    gRPC often reports a bad certificate only as an unreachable server; a plain handshake with the same
    CA and name tells the cases apart, so the message points at spec.tls.dnsNames or the CA, not the
    firewall.
    """
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cadata=ca_cert.decode() if ca_cert else None)
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            with context.wrap_socket(sock, server_hostname=server_name or host.strip("[]")):
                return None
    except ssl.SSLCertVerificationError as exc:
        # 62/64: X509_V_ERR_HOSTNAME_MISMATCH / IP_ADDRESS_MISMATCH; the rest: an untrusted chain.
        return "TLSNameMismatch" if exc.verify_code in (62, 64) else "TLSUntrusted"
    except (OSError, ValueError):
        return None


def explain_admin_failure(
    exc: Exception, address: str, what: str, *, ca_cert: bytes | None, server_name: str | None, insecure: bool
) -> tuple[str, str]:
    """`explain_admin_error`, with an unreachable PS checked for a certificate problem first."""
    reason, message = explain_admin_error(exc, address, what)
    if reason == "PSUnreachable" and not insecure:
        found = diagnose_tls(address, ca_cert, server_name)
        if found:
            return found, f"could not {what} at the PS {address}: the TLS handshake failed ({_HINTS[found]})"
    return reason, message


def explain_admin_error(exc: Exception, address: str, what: str) -> tuple[str, str]:
    """(Reason, message) for a failed admin call; `what` names the action, e.g. "mint a token"."""
    code = getattr(exc, "code", "UNKNOWN")
    reason = _REASONS.get(code, "AdminCallFailed")
    details = getattr(exc, "details", None) or str(exc)
    lowered = details.lower()
    if reason == "PSUnreachable" and any(s in lowered for s in _TLS_NAME):
        reason = "TLSNameMismatch"
    elif reason == "PSUnreachable" and any(s in lowered for s in _TLS_TRUST):
        reason = "TLSUntrusted"
    hint = _HINTS.get(reason)
    message = f"could not {what} at the PS {address}: {code}: {details}"
    return reason, f"{message} ({hint})" if hint else message
