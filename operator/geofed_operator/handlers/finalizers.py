"""A kopf timer (or daemon) that needs no finalizer.

kopf marks every timer and daemon as needing the operator's finalizer, so that it stops them before the
object goes. The Federation's status timer needs no such guarantee (the handler ignores a Federation
once its DELETED event arrived): a pass that overlaps the deletion
only re-applies children owned by the gone Federation (the garbage collector removes them again) or
reads a PS that is going away. With the finalizer, a Federation could not be deleted while no operator
runs (after `helm uninstall`, or with `kubectl delete -f crds/`): it would hang in Terminating.

kopf has no public switch for this; the registered handler is replaced by a copy whose
`requires_finalizer` is False, and kopf then also removes the finalizer from objects that carry it.
What kopf would do with the finalizer and does not do without: stop the timer of a deleted object. It
keeps calling it, every interval, until the operator restarts (the handler returns at once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import kopf


def release_finalizer(registry: kopf.OperatorRegistry, fn: Callable[..., Any]) -> None:
    """Let the timer or daemon registered for `fn` run without the operator's finalizer on its objects."""
    spawning = registry._spawning
    found = [i for i, handler in enumerate(spawning._handlers) if getattr(handler, "fn", None) is fn]
    if len(found) != 1:
        raise RuntimeError(
            f"expected one kopf timer or daemon for {fn.__qualname__} in the registry, found {len(found)}: "
            "kopf's registry layout changed; check handlers/finalizers.py against this kopf version"
        )
    index = found[0]
    spawning._handlers[index] = dataclasses.replace(spawning._handlers[index], requires_finalizer=False)
