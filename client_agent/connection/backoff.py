"""Exponential backoff with full jitter for reconnects and retransmissions (paper §III-B4)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    """Delays base·2^k capped at `cap`, each drawn uniformly from [0, delay] (AWS 'full jitter')."""

    base_s: float = 0.2
    cap_s: float = 15.0
    attempt: int = 0

    def next_delay(self) -> float:
        delay = min(self.cap_s, self.base_s * (2**self.attempt))
        self.attempt += 1
        return random.uniform(0.0, delay)

    def reset(self) -> None:
        self.attempt = 0
