"""Refusals of the sharded PS, in domain terms; the gRPC modules map them to status codes."""

from __future__ import annotations

from ..errors import PushRejected, Unavailable


class ShardRefused(PushRejected):
    """A shard (or the front on a shard's behalf) refuses: a frame outside the slice, a version it does not hold.

    `reason`: slice | frame | version | unknown_push | codec | federation.
    """


class ShardUnavailable(Unavailable):
    """A shard cannot be reached (down, restarting): the push is not taken; retry it (nothing was applied)."""
