"""Credentials of a federation: one-time tokens, rejoin tokens, site credentials, sessions.

Secrets are random (`secrets.token_urlsafe`), stored only as SHA-256 hashes, bound to a client id,
expire, and are consumed atomically under one lock (paper §III-B4: rejoin with a one-time token).
Sessions are short-lived and deliberately not persisted: after a PS restart clients re-Join.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field

from .errors import FrozenMismatch, TokenizerMismatch

_CLIENT_ID = re.compile(r"[A-Za-z0-9._-]{1,253}")


class AuthError(Exception):
    """A credential was missing, unknown, expired, already used, or used outside its scope."""

    def __init__(self, message: str, *, permission: bool = False) -> None:
        super().__init__(message)
        self.permission = permission  # True: authenticated but not allowed (PERMISSION_DENIED)


class SiteExists(Exception):
    """A site credential was asked for a site that has one, without asking to rotate it."""


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _check_site_scope(site: str, client_id: str) -> None:
    """A site may only mint ids of the form `<site>.<name>` (or exactly `<site>`)."""
    if client_id != site and not client_id.startswith(site + "."):
        raise AuthError(f"site {site!r} may not mint tokens for client {client_id!r}", permission=True)


@dataclass(frozen=True)
class TokenRecord:
    """What a one-time (or rejoin) token grants; keyed by the token's hash."""

    client_id: str
    site: str
    expires_at: float
    master: bool = False
    kind: str = "join"  # "join" (minted by admin/site) or "rejoin" (handed out at Join)


@dataclass
class Session:
    """A live client session; `expires_at` moves forward on every heartbeat."""

    client_id: str
    site: str
    master: bool
    expires_at: float
    created_at: float = field(default_factory=time.time)
    peer: str = ""  # the connection that joined; "" = not bound
    tokenizer: tuple[str, str] = ("", "")  # the tokenizer (name, sha256) it declared at Join (empty: none)


@dataclass(frozen=True)
class Principal:
    """Who is calling an admin RPC: the admin, or one site (scoped to its own client ids)."""

    site: str | None  # None = the federation admin

    @property
    def is_admin(self) -> bool:
        return self.site is None


class Registry:
    """Thread-safe store of every credential the PS knows; only hashes are kept."""

    def __init__(
        self,
        admin_credential: str,
        *,
        session_ttl_s: float = 300.0,
        rejoin_ttl_s: float = 7 * 86400,
        master_client_id: str | None = None,
        max_client_ids_per_site: int = 4,
    ):
        if len(admin_credential) < 16:
            raise ValueError("admin credential must be at least 16 characters")
        self._admin_hash = _hash(admin_credential)
        # The one client whose site may mint it a master token (Kubernetes: the Federation names it,
        # spec.server.masterClientID); every token minted for it is a master token.
        self.master_client_id = master_client_id
        self._lock = threading.Lock()
        self._tokens: dict[str, TokenRecord] = {}
        self._sites: dict[str, str] = {}  # site -> credential hash
        self._revoked_sites: set[str] = set()
        # Client-id quota of site credentials: how many ids each site may mint, and the ids it has minted.
        self.max_client_ids_per_site = max_client_ids_per_site
        self._site_quota: dict[str, int] = {}
        self._site_ids: dict[str, set[str]] = {}
        # The frozen digest joined clients declared, under the federation settings it belongs to (frozen_key).
        self._frozen: tuple[str, str] = ("", "")
        # The tokenizer (name, sha256) a master client declared, the federation's when its settings name none.
        self._tokenizer: tuple[str, str] = ("", "")
        self._sessions: dict[str, Session] = {}
        self.session_ttl_s = session_ttl_s
        self.rejoin_ttl_s = rejoin_ttl_s

    # ---- admin surface --------------------------------------------------------------------------

    def authenticate_admin(self, credential: str) -> Principal:
        """Map an admin-surface credential to a principal, or raise AuthError."""
        digest = _hash(credential)
        if hmac.compare_digest(digest, self._admin_hash):
            return Principal(site=None)
        with self._lock:
            for site, site_hash in self._sites.items():
                if hmac.compare_digest(digest, site_hash):
                    return Principal(site=site)
        raise AuthError("unknown or revoked admin/site credential")

    def mint_token(
        self, principal: Principal, client_id: str, site: str, ttl_s: float, *, master: bool = False
    ) -> tuple[str, float]:
        """Mint a one-time join token bound to `client_id`; sites only for their own clients.

        The master token (the client that installs Θ0) is the admin's to mint, or the named master
        client's site's: the federation admin names that client, a site cannot claim the role.
        """
        if not _CLIENT_ID.fullmatch(client_id):
            raise ValueError("client_id must be 1..253 characters of letters, digits, '.', '_' and '-'")
        if ttl_s <= 0:
            raise ValueError("token ttl must be positive")
        if not principal.is_admin:
            assert principal.site is not None
            _check_site_scope(principal.site, client_id)
            if master and client_id != self.master_client_id:
                named = repr(self.master_client_id) if self.master_client_id else "no client"
                raise AuthError(
                    f"site {principal.site!r} may not mint a master token for {client_id!r}: the federation "
                    f"names {named} as its master (masterClientID)",
                    permission=True,
                )
            site = principal.site
        master = master or client_id == self.master_client_id
        token = secrets.token_urlsafe(32)
        expires_at = time.time() + ttl_s
        with self._lock:
            if not principal.is_admin:
                self._take_client_id(site, client_id)
            self._tokens[_hash(token)] = TokenRecord(client_id, site, expires_at, master)
        return token, expires_at

    def create_site(self, principal: Principal, site: str, *, rotate: bool = False) -> str:
        """Issue the credential of `site`; admin only. An enrolled site's is replaced only with `rotate`.

        Replacing it stops the site's SiteClients from minting tokens until they hold the new one, so
        a second enrolment without `rotate` raises SiteExists, whether or not a client has joined yet.
        """
        if not principal.is_admin:
            raise AuthError("only the federation admin may enrol sites", permission=True)
        if not site or len(site) > 63:
            raise ValueError("site name must be 1..63 characters")
        credential = "site-" + secrets.token_urlsafe(32)
        with self._lock:
            if site in self._sites and not rotate:
                raise SiteExists(
                    f"site {site!r} is already enrolled: a new credential would replace the one its SiteClients "
                    "use, and they could not launch until the new site.yaml is applied there; ask for rotation "
                    "explicitly (geofed site enroll --rotate) to do so"
                )
            self._sites[site] = _hash(credential)
            self._revoked_sites.discard(site)
        return credential

    # ---- client-id quota of site credentials ---------------------------------------------------

    def set_site_quota(self, principal: Principal, site: str, max_client_ids: int) -> None:
        """Set how many client ids `site`'s credential may mint tokens for (0: the PS's default); admin only."""
        if not principal.is_admin:
            raise AuthError("only the federation admin may set a site's client-id quota", permission=True)
        if max_client_ids < 0:
            raise ValueError("max_client_ids must be 0 (the PS's default) or more")
        with self._lock:
            if max_client_ids:
                self._site_quota[site] = max_client_ids
            else:
                self._site_quota.pop(site, None)

    def site_quota(self, site: str) -> int:
        return self._site_quota.get(site, self.max_client_ids_per_site)

    def _take_client_id(self, site: str, client_id: str) -> None:
        """Record that `site` minted a token for `client_id`; refuse a new id beyond its quota (under the lock)."""
        ids = self._site_ids.setdefault(site, set())
        quota = self.site_quota(site)
        if client_id not in ids and len(ids) >= quota:
            raise AuthError(
                f"site quota: site {site!r} already minted tokens for {quota} client ids ({', '.join(sorted(ids))}), "
                f"its limit (max_client_ids); reuse one of them, or have the federation admin raise the quota",
                permission=True,
            )
        ids.add(client_id)

    def revoke_site(self, principal: Principal, site: str) -> bool:
        """Revoke a site: its credential, unused tokens and live sessions stop working."""
        if not principal.is_admin:
            raise AuthError("only the federation admin may revoke sites", permission=True)
        with self._lock:
            existed = self._sites.pop(site, None) is not None
            self._revoked_sites.add(site)
            self._tokens = {h: r for h, r in self._tokens.items() if r.site != site}
            self._sessions = {h: s for h, s in self._sessions.items() if s.site != site}
        return existed

    def revoke_client(self, principal: Principal, client_id: str, token: str = "") -> tuple[int, int]:
        """Revoke one unused token of `client_id`, or every unused (join and rejoin) token and live session.

        Returns (tokens revoked, sessions ended). A site may only revoke its own clients; a token minted for
        another client id is not touched (and not revealed: it counts as not found).
        """
        if not _CLIENT_ID.fullmatch(client_id):
            raise ValueError("client_id must be 1..253 characters of letters, digits, '.', '_' and '-'")
        if not principal.is_admin:
            assert principal.site is not None
            _check_site_scope(principal.site, client_id)
        with self._lock:
            if token:
                digest = _hash(token)
                record = self._tokens.get(digest)
                if record is None or record.client_id != client_id:
                    return 0, 0
                del self._tokens[digest]
                return 1, 0
            before_tokens, before_sessions = len(self._tokens), len(self._sessions)
            self._tokens = {h: r for h, r in self._tokens.items() if r.client_id != client_id}
            self._sessions = {h: s for h, s in self._sessions.items() if s.client_id != client_id}
            return before_tokens - len(self._tokens), before_sessions - len(self._sessions)

    # ---- client surface -------------------------------------------------------------------------

    def join(
        self, token: str, client_id: str, peer: str = "", *, frozen_digest: str = "", frozen_key: str = "",
        tokenizer: tuple[str, str] = ("", ""), settings_tokenizer: tuple[str, str] | None = None,
    ) -> tuple[str, Session, str]:
        """Consume a token atomically; return (session credential, session, fresh rejoin token).

        With `peer` set, the session only works from that connection: a stolen session credential is
        useless elsewhere, and a client whose connection was replaced simply re-joins (rejoin token).
        A declared `frozen_digest` other than the one held under `frozen_key` is refused (FrozenMismatch)
        before the token is consumed; the first one declared under a key is held from then on.
        A declared `tokenizer` (name, sha256) other than the federation's (`settings_tokenizer`, else the one a
        master declared) is refused (TokenizerMismatch) before the token is consumed; with neither, a master's
        is held from then on.
        """
        digest = _hash(token)
        now = time.time()
        with self._lock:
            record = self._usable(digest, client_id, now)
            held = self._frozen[1] if self._frozen[0] == frozen_key else ""
            if frozen_digest and held and frozen_digest != held:
                raise FrozenMismatch(frozen_digest, held)  # the token is not consumed
            federation_tokenizer = settings_tokenizer or self._tokenizer
            if tokenizer[1] and federation_tokenizer[1] and tokenizer[1] != federation_tokenizer[1]:
                raise TokenizerMismatch(tokenizer, federation_tokenizer)  # the token is not consumed
            if tokenizer[1] and not federation_tokenizer[1] and record.master:
                self._tokenizer = tokenizer
            del self._tokens[digest]
            if frozen_digest and not held:
                self._frozen = (frozen_key, frozen_digest)
            session_secret = secrets.token_urlsafe(32)
            session = Session(client_id, record.site, record.master, now + self.session_ttl_s, peer=peer,
                              tokenizer=tokenizer)
            self._sessions[_hash(session_secret)] = session
            rejoin = secrets.token_urlsafe(32)
            self._tokens[_hash(rejoin)] = TokenRecord(
                client_id, record.site, now + self.rejoin_ttl_s, record.master, kind="rejoin"
            )
            # Only the newest rejoin token of a client stays valid.
            self._tokens = {
                h: r
                for h, r in self._tokens.items()
                if not (r.kind == "rejoin" and r.client_id == client_id and h != _hash(rejoin))
            }
        return session_secret, session, rejoin

    def frozen_digest(self, frozen_key: str) -> str:
        """The frozen digest held under `frozen_key`; empty when none was declared under it."""
        with self._lock:
            return self._frozen[1] if self._frozen[0] == frozen_key else ""

    @property
    def master_tokenizer(self) -> tuple[str, str]:
        """The tokenizer (name, sha256) a master declared; empty while none did."""
        with self._lock:
            return self._tokenizer

    def check(self, token: str, client_id: str) -> TokenRecord:
        """The token's record if `join` would accept it for `client_id`; nothing is consumed."""
        with self._lock:
            return self._usable(_hash(token), client_id, time.time())

    def _usable(self, digest: str, client_id: str, now: float) -> TokenRecord:
        """The record of a token `client_id` may use now, or AuthError saying why not (caller holds the lock)."""
        record = self._tokens.get(digest)
        if record is None:
            raise AuthError("token unknown or already used")
        if record.expires_at < now:
            del self._tokens[digest]
            raise AuthError("token expired")
        if record.client_id != client_id:
            # Not consumed: a foreign client must not be able to burn someone else's token.
            raise AuthError(f"token was minted for another client id, not {client_id!r}")
        if record.site in self._revoked_sites:
            raise AuthError(f"site {record.site!r} is revoked")
        return record

    def session(self, credential: str, peer: str = "") -> Session:
        """Look up a live session or raise AuthError telling the client to re-Join."""
        with self._lock:
            session = self._sessions.get(_hash(credential))
            if session is None:
                raise AuthError("unknown session (the PS may have restarted): re-join with a token")
            if session.expires_at < time.time():
                del self._sessions[_hash(credential)]
                raise AuthError("session expired: re-join with a token")
            if session.peer and peer and peer != session.peer:
                raise AuthError("session is bound to another connection: re-join with a token")
            return session

    def renew(self, credential: str, peer: str = "") -> Session:
        """Extend a live session by the session TTL (heartbeat)."""
        session = self.session(credential, peer)
        with self._lock:
            session.expires_at = time.time() + self.session_ttl_s
        return session

    def live_sessions(self) -> list[Session]:
        """Sessions that have not expired, one per client (the newest)."""
        now = time.time()
        with self._lock:
            newest: dict[str, Session] = {}
            for s in self._sessions.values():
                if s.expires_at >= now and (s.client_id not in newest or s.created_at > newest[s.client_id].created_at):
                    newest[s.client_id] = s
        return list(newest.values())

    # ---- durability (hashes only) ---------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything except sessions, as plain JSON-able data (hashes, never secrets)."""
        now = time.time()
        with self._lock:
            return {
                "tokens": {h: asdict(r) for h, r in self._tokens.items() if r.expires_at >= now},
                "sites": dict(self._sites),
                "revoked_sites": sorted(self._revoked_sites),
                "site_quota": dict(self._site_quota),
                "site_client_ids": {site: sorted(ids) for site, ids in self._site_ids.items()},
                "frozen": {"key": self._frozen[0], "digest": self._frozen[1]},
                "tokenizer": {"name": self._tokenizer[0], "sha256": self._tokenizer[1]},
            }

    def load_state_dict(self, state: dict) -> None:
        """Restore tokens and sites from a checkpoint; sessions start empty."""
        with self._lock:
            self._tokens = {h: TokenRecord(**r) for h, r in state.get("tokens", {}).items()}
            self._sites = dict(state.get("sites", {}))
            self._revoked_sites = set(state.get("revoked_sites", []))
            self._site_quota = {str(k): int(v) for k, v in state.get("site_quota", {}).items()}
            self._site_ids = {str(k): set(v) for k, v in state.get("site_client_ids", {}).items()}
            frozen = state.get("frozen", {})
            self._frozen = (str(frozen.get("key", "")), str(frozen.get("digest", "")))
            tokenizer = state.get("tokenizer", {})
            self._tokenizer = (str(tokenizer.get("name", "")), str(tokenizer.get("sha256", "")))
            self._sessions = {}
