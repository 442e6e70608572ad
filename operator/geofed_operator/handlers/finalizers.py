"""A kopf daemon (or timer) that needs no finalizer.

kopf marks every daemon and timer as needing the operator's finalizer, so that it stops them before the
object goes. The Federation's status loop needs no such guarantee (it ends on the DELETED event
itself): a pass that overlaps the deletion
only re-applies children owned by the gone Federation (the garbage collector removes them again) or
reads a PS that is going away. With the finalizer, a Federation could not be deleted while no operator
runs (after `helm uninstall`, or with `kubectl delete -f crds/`): it would hang in Terminating.

kopf has no public switch for this; the registered handler is replaced by a copy whose
`requires_finalizer` is False, and kopf then also removes the finalizer from objects that carry it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import kopf


def release_finalizer(registry: kopf.OperatorRegistry, fn: Callable[..., Any]) -> None:
    """Let the daemon or timer registered for `fn` run without the operator's finalizer on its objects."""
    spawning = registry._spawning
    found = [i for i, handler in enumerate(spawning._handlers) if getattr(handler, "fn", None) is fn]
    if len(found) != 1:
        raise RuntimeError(
            f"expected one kopf daemon or timer for {fn.__qualname__} in the registry, found {len(found)}: "
            "kopf's registry layout changed; check handlers/finalizers.py against this kopf version"
        )
    index = found[0]
    spawning._handlers[index] = dataclasses.replace(spawning._handlers[index], requires_finalizer=False)
