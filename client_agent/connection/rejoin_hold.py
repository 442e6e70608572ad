"""A global model kept from before a relaunch (the client checkpoint's exact base), held until the PS vouches
for it: adopted as it is, used as the base of the first transfer, or dropped."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from geofed.manifest import Manifest

log = logging.getLogger("geofed.client")


@dataclass
class GlobalVersion:
    """One fully received, checksum-verified global model."""

    version: int
    flat: np.ndarray
    manifest: Manifest
    received_at: float = field(default_factory=time.monotonic)
    seconds: float = 0.0  # wall time of the transfer
    instance: str = ""  # the PS instance that published it (versions never change within one instance)

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes


class RejoinHold:
    """The kept model, unverified, until the first transfer settles it."""

    def __init__(self) -> None:
        self.kept: GlobalVersion | None = None

    def offer(self, kept: GlobalVersion, join_version: int, server_instance: str) -> str:
        """'adopted': the PS instance that published `kept` is still up and at that version (versions never
        change within one instance), so it is the model, and nothing is fetched. 'difference': the PS is newer,
        so the first transfer is the difference from it; the result is checked against the PS's sha256 and a
        mismatch drops it for a whole-model transfer. 'dropped': anything else (the PS restarted and may have
        republished that version number differently, or is behind it)."""
        if kept.version == join_version and kept.instance and kept.instance == server_instance:
            return "adopted"
        if 0 < kept.version < join_version:
            self.kept = kept
            return "difference"
        return "dropped"

    def refused(self) -> None:
        """The transfer built on the kept model had to restart: it was not the PS's version after all."""
        if self.kept is not None:
            log.warning("event=held_model_dropped version=%d", self.kept.version)
            self.kept = None

    def settled(self) -> None:
        """A transfer completed and verified: the kept model has served (or was never needed)."""
        self.kept = None
