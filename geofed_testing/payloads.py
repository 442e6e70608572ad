"""A validated push as a `Strategy` sees it, built from an array: for in-process strategy tests."""

from __future__ import annotations

import numpy as np


class FakePayload:
    """`ps_server.aggregation.strategy.Payload` over one in-memory array."""

    def __init__(self, client_id: str, values: np.ndarray) -> None:
        self.client_id, self.values = client_id, np.asarray(values, dtype=np.float32)
        self.numel, self.norm = self.values.size, float(np.linalg.norm(self.values))

    def iter_values(self, max_numel: int):
        yield 0, self.values[:max_numel]
