"""A validated push as a `Strategy` or the `Aggregator` sees it, built from an array: for in-process tests."""

from __future__ import annotations

import numpy as np

from ps_server.ingest import PushHeader, ReceivedPush


class FakePayload:
    """`ps_server.aggregation.strategy.Payload` over one in-memory array."""

    def __init__(self, client_id: str, values: np.ndarray) -> None:
        self.client_id, self.values = client_id, np.asarray(values, dtype=np.float32)
        self.numel, self.norm = self.values.size, float(np.linalg.norm(self.values))

    def iter_values(self, max_numel: int):
        yield 0, self.values[:max_numel]


class MemoryPush(ReceivedPush):
    """`ps_server.ingest.ReceivedPush` over one in-memory array, for in-process `Aggregator` tests: the real
    push is decoded from its spool piece by piece and carries the count sketch its decode built."""

    def __init__(self, client_id: str, values: np.ndarray, *, base: int = 1, steps: int = 1, tokens: int = 1,
                 upload_id: str = "") -> None:
        self.client_id, self._values = client_id, np.asarray(values, dtype=np.float32)
        self.numel, self.codec_name = self._values.size, "fp32"
        self.norm = float(np.linalg.norm(self._values.astype(np.float64)))
        self.header = PushHeader(base_version=base, upload_id=upload_id or f"{client_id}/{base}", codec_header=b"",
                                 payload_bytes=0, num_tokens=tokens, local_steps=steps)

    def iter_values(self, max_numel: int):
        yield 0, self._values[:max_numel]

    def close(self) -> None:
        pass
