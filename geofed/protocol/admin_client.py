"""Admin surface client: mint one-time tokens, enrol/revoke sites, read status (CLI and operator)."""

from __future__ import annotations

import time

import grpc

from . import geofed_pb2 as pb
from . import geofed_pb2_grpc as pb_grpc
from .auth import admin as admin_metadata
from .channel import open_channel
from .messages import report_from_proto
from .transport_probe import first_connect_failed, transport_mismatch


class AdminError(Exception):
    """An admin call failed; `code` is the grpc.StatusCode name (UNAVAILABLE, UNAUTHENTICATED, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.details = message


class AdminClient:
    """Blocking client of the Admin service; use as a context manager."""

    def __init__(
        self, address: str, credential: str, *, insecure: bool = False, ca_cert: bytes | None = None,
        timeout_s: float = 10.0, client_cert: bytes | None = None, client_key: bytes | None = None,
        server_name: str | None = None,
    ) -> None:
        self.channel = open_channel(address, insecure=insecure, ca_cert=ca_cert, client_cert=client_cert,
                                    client_key=client_key, server_name=server_name)
        self.stub = pb_grpc.AdminStub(self.channel)
        self.metadata = admin_metadata(credential)
        self.timeout_s = timeout_s
        self.address = address
        self.insecure = insecure
        self._transport_checked = False

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method, request):
        deadline = time.monotonic() + self.timeout_s
        if not self._transport_checked:
            # A first connection that fails may be a TLS/plaintext mismatch, which no retry until the deadline
            # fixes (and each retry of a TLS handshake logs an error): probed once, then named.
            self._transport_checked = True
            if first_connect_failed(self.channel, self.timeout_s) and (
                mismatch := transport_mismatch(self.address, insecure=self.insecure)
            ):
                raise AdminError("UNAVAILABLE", mismatch)
        try:
            # wait_for_ready: ride out a reconnect backoff (e.g. right after a PS restart) up to the timeout.
            return method(request, metadata=self.metadata, timeout=max(deadline - time.monotonic(), 1.0),
                          wait_for_ready=True)
        except grpc.RpcError as exc:
            code = exc.code().name if exc.code() else "UNKNOWN"
            detail = exc.details() or ""
            if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                detail = f"parameter server at {self.address} unreachable ({detail})"
            raise AdminError(code, detail) from None

    def create_token(
        self, client_id: str, site: str = "", ttl_s: float = 0.0, master: bool = False
    ) -> tuple[str, float]:
        """Mint a one-time token for `client_id`; returns (token, expires_at unix seconds)."""
        r = self._call(self.stub.CreateToken,
                       pb.CreateTokenRequest(client_id=client_id, site=site, ttl_s=ttl_s, master=master))
        return r.token, r.expires_at

    def create_site_credential(self, site: str, rotate: bool = False, max_client_ids: int = 0) -> str:
        """A new credential for `site`, which may mint tokens for `max_client_ids` client ids (0: the PS's
        default); an enrolled site's is replaced only with `rotate` (ALREADY_EXISTS without it)."""
        request = pb.SiteRequest(site=site, rotate=rotate, max_client_ids=max_client_ids)
        return self._call(self.stub.CreateSiteCredential, request).credential

    def revoke_site(self, site: str) -> bool:
        return self._call(self.stub.RevokeSite, pb.SiteRequest(site=site)).revoked

    def revoke_client(self, client_id: str, token: str = "") -> tuple[int, int]:
        """Revoke `token` of `client_id`, or (no token) all its unused tokens and sessions; (tokens, sessions)."""
        r = self._call(self.stub.RevokeClient, pb.RevokeClientRequest(client_id=client_id, token=token))
        return r.tokens, r.sessions

    def status(self) -> dict:
        r = self._call(self.stub.GetStatus, pb.StatusRequest())
        # Repeated fields as lists: the dict goes to json.dump (`geofed status --json`) and the operator.
        # Repeated messages (a sharded PS's `shards`) as dicts of their fields.
        return {f.name: [_fields(v) if f.message_type else v for v in getattr(r, f.name)] if f.is_repeated
                else getattr(r, f.name) for f in r.DESCRIPTOR.fields}

    def list_clients(self) -> list[dict]:
        r = self._call(self.stub.ListClients, pb.ListClientsRequest())
        out = []
        for c in r.clients:
            entry = {f.name: getattr(c, f.name) for f in c.DESCRIPTOR.fields if f.name != "report"}
            entry["report"] = report_from_proto(c.report)
            out.append(entry)
        return out


def _fields(message) -> dict:
    return {f.name: getattr(message, f.name) for f in message.DESCRIPTOR.fields}
