"""kopf handlers, registered per role into an explicit registry (no import-time side effects).

`build_registry("cloud")` serves Federations, `"site"` SiteClients, `"both"` everything; the CLI
(`geofed operator`) and the tests (`kopf.testing.KopfRunner(..., registry=...)`) use the same call.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from geofed_operator import names
from geofed_operator.handlers import federation, siteclient
from geofed_operator.handlers.deps import Deps
from geofed_operator.settings import Role

ROLES: dict[str, tuple[str, ...]] = {"cloud": ("cloud",), "site": ("site",), "both": ("cloud", "site")}


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """Keep kopf's bookkeeping in our own annotations (the status schema stays ours) and finalizer name."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=names.KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=names.KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{names.GROUP}/cleanup"
    settings.posting.level = logging.WARNING  # Kubernetes events for problems only
    # A deleted object waits for its timers to stop. A timer caught mid-pass (a reconcile, a PS status call)
    # is re-checked only every cancellation_polling seconds, kopf's default 60: deleting a Federation or a
    # SiteClient could hang for a minute. Our passes take well under a second.
    settings.background.cancellation_polling = 1.0
    # The site role watches client pods only: the API server filters by label, so the operator never lists,
    # caches or wakes up for the cluster's other pods (a handler's `labels=` alone filters in the operator).
    settings.watching.label_selectors["v1", "pods"] = names.LABEL_SITECLIENT


def build_registry(role: Role, deps: Deps | None = None) -> kopf.OperatorRegistry:
    """A registry with the handlers of `role` sharing one set of dependencies."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {sorted(ROLES)}")
    deps = deps or Deps()
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_kopf(settings)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    if "cloud" in ROLES[role]:
        federation.register(registry, deps)
    if "site" in ROLES[role]:
        siteclient.register(registry, deps)
    return registry
