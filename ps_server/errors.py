"""Why the PS refuses a push, in domain terms; only `grpc_api` maps these to gRPC status codes.

`reason` is the short label the rejection metric counts by; `message` is what the client reads.
A stale delta is not an error but an outcome (`PushOutcome("STALE")`): the client resyncs and retrains.
"""

from __future__ import annotations

from geofed.frozen_digest import frozen_mismatch
from geofed.tokenizer_identity import tokenizer_mismatch


class PushRejected(Exception):
    """A push the PS refuses; nothing of it reaches the global model."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class InvalidPush(PushRejected):
    """Malformed: protocol order, shape, codec, sizes, non-finite values, bad manifest."""


def check_first_model_codec(lossless: bool) -> None:
    """The initial model travels exactly (`CodecSpec.lossless`): every client starts from the same weights."""
    if not lossless:
        raise InvalidPush("codec", "the initial model must be sent with the fp32 codec")


class PushTooLarge(PushRejected):
    """Over a size or rate limit the PS enforces."""


class CorruptPayload(PushRejected):
    """The payload does not match its checksum."""


class NotPermitted(PushRejected):
    """The session may not do this (e.g. a non-master sending Θ0)."""


class NotReady(PushRejected):
    """The PS is not in a state to take it (no model yet, model already initialised)."""


class AlreadySent(PushRejected):
    """This client already sent a delta for this base version or round."""


class DeltaRefused(PushRejected):
    """A PS rule (`aggregation.rules`) refused the delta: nothing of it was applied; the site pushes a delta
    trained on a newer version."""


class RoundShareSpent(DeltaRefused):
    """The site's deltas in its open round already add up to its bound: nothing was applied; a delta of the
    site lands again once the other sites have pushed."""


class Unavailable(PushRejected):
    """A part of the PS the push needs is down (a sharded PS's shard): nothing was applied; retry it."""


class StaleDelta(PushRejected):
    """The delta's base version is too old (or ahead of a restarted PS): resync and retrain."""


class ParadigmMismatch(Exception):
    """A joining client runs another paradigm or exchanges another layout than the federation."""


class FrozenMismatch(ParadigmMismatch):
    """A joining client built another frozen part (base model, fixed projections) than the federation's."""

    def __init__(self, client: str, federation: str) -> None:
        super().__init__(frozen_mismatch(client, federation))
        self.client, self.federation = client, federation


class TokenizerMismatch(ParadigmMismatch):
    """A joining client tokenises with another tokenizer (another identity) than the federation's."""

    def __init__(self, client: tuple[str, str], federation: tuple[str, str]) -> None:
        super().__init__(tokenizer_mismatch(client[0], client[1], federation[0], federation[1]))
        self.client, self.federation = client, federation
