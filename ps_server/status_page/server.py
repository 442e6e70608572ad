"""The status page's HTTP server: its own port, stdlib only, every asset served from this package.

Its own port rather than the Prometheus one: the metrics port is scraped without credentials (and is
often exposed to the cluster's Prometheus), while the page is guarded like the admin API and binds
loopback by default; one server for both would widen what the scrape port shows or lock Prometheus out.
Three static files (HTML, JS, CSS) are read once at start; `/api/status` answers the JSON of `view.py`.
The Content-Security-Policy allows this origin only, so nothing can come from a CDN: the page works
offline.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..ratelimit import RateLimiter
from ..registry import AuthError
from .access import Refusal, check_host, credential_from_header, is_loopback, parse_query, scope_site
from .history import LossHistory
from .view import build_view

if TYPE_CHECKING:
    from ..core import ParameterServerCore

log = logging.getLogger("geofed.ps")

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/status.js": ("status.js", "text/javascript; charset=utf-8"),
    "/static/status.css": ("status.css", "text/css; charset=utf-8"),
}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
                               "form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class StatusPage:
    """The page of one PS; `url` once started."""

    def __init__(self, core: ParameterServerCore, host: str, port: int, *, require_credential: bool) -> None:
        self.core = core
        self.history = LossHistory()  # (version, time, mean reported losses) of the versions since it started
        core.on_round(lambda snap: self.history.record(snap.version, core.clients))
        self.require_credential = require_credential or not is_loopback(host)
        self.assets = {path: (files(__package__).joinpath("static", name).read_bytes(), kind)
                       for path, (name, kind) in _STATIC.items()}
        self.limiter = RateLimiter(max(5.0, core.server.rate_limit_per_s))
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{'localhost' if is_loopback(host) else host}:{self.port}/"
        self._thread: threading.Thread | None = None

    def start(self) -> StatusPage:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="geofed-status-page", daemon=True)
        self._thread.start()
        log.info("event=status_page url=%s credential=%s", self.url,
                 "required" if self.require_credential else "not needed on loopback")
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- one request ------------------------------------------------------------------------------

    def principal_site(self, authorization: str | None, host_header: str | None) -> str | None:
        """The site the caller may see (None: everything), or Refusal."""
        credential = credential_from_header(authorization)
        if credential is None:
            if self.require_credential:
                raise Refusal(401, "an admin or site credential is required")
            check_host(host_header, self.port)
            return None
        try:
            return self.core.registry.authenticate_admin(credential).site
        except AuthError:
            raise Refusal(403, "credential refused") from None

    def answer(self, peer: str, path: str, authorization: str | None, host: str | None) -> tuple[int, bytes, str]:
        """(status, body, content type) of a GET."""
        if not self.limiter.allow(peer):
            raise Refusal(429, "too many requests: slow down")
        site = self.principal_site(authorization, host)
        parts = urlsplit(path)
        if parts.path == "/api/status":
            query = parse_query(parts.query)
            view = build_view(self.core, self.history, scope_site(site, query), query.since)
            body = json.dumps(view, allow_nan=False)
            return 200, body.encode(), "application/json"
        if parts.path in self.assets:
            if parts.query:
                raise Refusal(400, "this address takes no query")
            body, kind = self.assets[parts.path]
            return 200, body, kind
        raise Refusal(404, "not found")


def _handler(page: StatusPage) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "geofed"
        sys_version = ""

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            try:
                status, body, kind = page.answer(self.client_address[0], self.path,
                                                 self.headers.get("Authorization"), self.headers.get("Host"))
            except Refusal as exc:
                self._refuse(exc)
                return
            self._send(status, body, kind)

        def do_POST(self) -> None:  # noqa: N802
            self._refuse(Refusal(405, "read-only: GET only"))

        do_PUT = do_DELETE = do_PATCH = do_POST  # noqa: N815

        def _refuse(self, exc: Refusal) -> None:
            if exc.status in (401, 403):
                page.core.metrics.auth_failures.labels("status_page").inc()
            extra = {"WWW-Authenticate": 'Basic realm="geofed status", charset="UTF-8"'} if exc.status == 401 else {}
            self._send(exc.status, f"{exc.status} {exc.message}\n".encode(), "text/plain; charset=utf-8", extra)

        def _send(self, status: int, body: bytes, kind: str, extra: dict | None = None) -> None:
            self.send_response(status)
            for key, value in {**_HEADERS, **(extra or {}), "Content-Type": kind}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's signature
            pass  # the PS logs refusals as metrics; request lines would only repeat what the page polls

    return Handler
