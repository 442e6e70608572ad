"""Client-side error feedback (EF-SGD, Karimireddy et al. 2019) for the lossy codecs.

Each push encodes delta + residual and keeps what quantisation dropped as the next residual, so the
error does not accumulate: the sum of what the PS received over rounds differs from the sum of the true
deltas by only the current residual. The paper lists error feedback among its open problems (§IV).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec
from geofed.codec.errors import CodecError


class ErrorFeedback:
    """Residual memory of one client (one float32 vector of the flattened delta's size).

    `encode` updates the residual immediately (the residual belongs to this payload): a retry after a
    failed push must resend the same bytes, not re-encode, or the dropped error would be counted twice.
    """

    def __init__(self, numel: int) -> None:
        if numel < 0:
            raise CodecError(f"numel must be >= 0, got {numel}")
        self.numel = numel
        self.residual = np.zeros(numel, dtype=np.float32)

    def encode(
        self, codec: Codec, delta: np.ndarray, *, frame_elems: int = DEFAULT_FRAME_ELEMS
    ) -> tuple[bytes, Iterator[bytes]]:
        """Encode delta + residual; the residual becomes what this encoding loses."""
        if not isinstance(delta, np.ndarray) or delta.shape != (self.numel,) or delta.dtype != np.float32:
            raise CodecError(f"delta must be a float32 array of shape ({self.numel},)")
        corrected = delta + self.residual  # the frames read this lazily; it lives as long as they do
        return codec.encode(corrected, frame_elems=frame_elems, residual_out=self.residual)

    def reset(self) -> None:
        """Forget the residual (e.g. after the client re-syncs to a fresh global model)."""
        self.residual.fill(0)

    def state_dict(self) -> dict[str, Any]:
        """{"residual": torch tensor sharing memory}; loadable with torch.load(weights_only=True)."""
        import torch

        return {"residual": torch.from_numpy(self.residual)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from `state_dict()` output (torch tensor or numpy array)."""
        if set(state) != {"residual"}:
            raise CodecError(f"error-feedback state must have exactly the key 'residual', got {sorted(state)}")
        value = state["residual"]
        arr = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        if arr.shape != (self.numel,) or arr.dtype != np.float32:
            raise CodecError(f"residual must be float32 of shape ({self.numel},), got {arr.dtype} {arr.shape}")
        if not np.isfinite(arr).all():
            raise CodecError("residual contains non-finite values")
        self.residual = np.array(arr, dtype=np.float32, copy=True)
