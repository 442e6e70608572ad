"""What the handlers share: settings, the Kubernetes adapter, the PS admin factory and the clock.

Injected (not global) so tests run the real handlers against an emulated API server and a fake or
real PS, with short intervals.
"""

from __future__ import annotations

import base64
import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from geofed_operator.keys import camel
from geofed_operator.kube import Kube
from geofed_operator.ps_admin import AdminFactory, open_admin
from geofed_operator.settings import OperatorSettings


def utcnow() -> dt.datetime:
    """The wall clock, in UTC."""
    return dt.datetime.now(dt.UTC)


@dataclass
class Deps:
    """Dependencies of every handler; `kube` connects lazily (after kopf has logged in)."""

    settings: OperatorSettings = field(default_factory=OperatorSettings)
    kube_factory: Callable[[], Kube] = Kube.from_environment
    admin_factory: AdminFactory = open_admin
    clock: Callable[[], dt.datetime] = utcnow
    # Tokens minted whose Secret could not be written yet, by (namespace, SiteClient uid, attempt): the
    # next try stores the same token instead of minting another.
    unstored_tokens: dict[tuple[str, str, int], tuple[str, float]] = field(default_factory=dict, repr=False)
    _kube: Kube | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def kube(self) -> Kube:
        """The API adapter, created on first use (handlers run in kopf's thread pool)."""
        with self._lock:
            if self._kube is None:
                self._kube = self.kube_factory()
            return self._kube


class MissingSecret(Exception):
    """A Secret (or one of its keys) the operator needs is absent; the message says which."""


def read_secret_key(kube: Kube, namespace: str, name: str, key: str, *, optional: bool = False) -> bytes | None:
    """The decoded value of `key` in Secret `name`; MissingSecret (or None if optional) when absent."""
    secret = kube.get("v1", "Secret", namespace, name)
    if secret is None:
        if optional:
            return None
        raise MissingSecret(f"Secret {name!r} not found in namespace {namespace!r}")
    data = secret.get("data") or {}
    if key not in data:
        if optional:
            return None
        raise MissingSecret(f"Secret {name!r} in namespace {namespace!r} has no key {key!r}")
    return base64.b64decode(data[key])


def readable(exc: ValidationError) -> str:
    """A one-line summary of a spec validation error (field path and problem)."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(camel(p) if isinstance(p, str) else str(p) for p in err.get("loc", ())) or "spec"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid spec: " + "; ".join(parts)
