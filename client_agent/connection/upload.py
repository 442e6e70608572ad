"""One encoded delta, spooled for retransmission, and the PS's receipt for it."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from typing import BinaryIO

from geofed.codec import ErrorFeedback
from geofed.protocol import geofed_pb2 as pb

TAKEN = ("ACCEPTED", "APPLIED", "DUPLICATE")  # push outcomes in which the PS has the delta


def settle_residual(ef: ErrorFeedback | None, status: str) -> None:
    """Move an error-feedback residual on by a push's outcome: when the PS took the delta its quantisation
    error carries over; when it refused it (STALE, or DEFERRED by its site's round share) the residual stays
    as it was before encoding it."""
    if ef is None:
        return
    ef.commit() if status in TAKEN else ef.discard()


@dataclass
class Upload:
    """One encoded delta kept (spooled) for retransmission.

    `saved()` and `restored()` carry it across a relaunch: a client preempted mid-push resends the same
    upload id instead of training again, and the PS answers DUPLICATE if it had already taken it.
    """

    header: pb.DeltaHeader
    spool: BinaryIO
    digest: bytes
    instance: str = ""
    accepted_at_version: int = 0

    @property
    def upload_id(self) -> str:
        return self.header.upload_id

    def saved(self) -> tuple[bytes, bytes]:
        """(serialised header, payload) of this upload."""
        self.spool.seek(0)
        return self.header.SerializeToString(), self.spool.read()

    @classmethod
    def restored(cls, header: bytes, payload: bytes) -> Upload:
        """The upload `saved()` described, with its original upload id."""
        head = pb.DeltaHeader.FromString(header)
        if head.payload_bytes != len(payload):
            raise ValueError(f"saved upload holds {len(payload)} payload bytes, its header says {head.payload_bytes}")
        spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 - owned by the upload
        spool.write(payload)
        return cls(head, spool, hashlib.sha256(payload).digest())


@dataclass
class PushReceipt:
    status: str
    version: int
    staleness: int
    weight: float
    payload_bytes: int
    seconds: float
    attempts: int
