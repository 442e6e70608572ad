"""Client-side error feedback (EF-SGD, Karimireddy et al. 2019) for the lossy codecs.

Each push encodes delta + residual and keeps what quantisation dropped as the next residual, so the
error does not accumulate: the sum of what the PS received over rounds differs from the sum of the true
deltas by only the current residual. The paper lists error feedback among its open problems (§IV).

With a decay β < 1 the residual becomes SparseLoCo's outer momentum (Sarfi et al. 2025): e ← β·e + Δ,
send C(e), e ← e − C(e). β = 1 (the default) is plain error feedback, where nothing trained is lost.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from geofed.codec.base import DEFAULT_FRAME_ELEMS, Codec
from geofed.codec.errors import CodecError


class ErrorFeedback:
    """Residual memory of one client (one float32 vector of the flattened delta's size).

    Note: `encode` stages the new residual and leaves the current one in place; `commit` adopts it once
    the PS has taken the payload (ACCEPTED, APPLIED or DUPLICATE), `discard` drops it when the PS refused
    the payload (stale) and nothing of it was applied. A retry of a failed push resends the same bytes
    with the same upload id; it never re-encodes, so a staged residual belongs to exactly one payload.
    """

    def __init__(self, numel: int, decay: float = 1.0) -> None:
        if numel < 0:
            raise CodecError(f"numel must be >= 0, got {numel}")
        if not 0 < decay <= 1:
            raise CodecError(f"error-feedback decay must be in (0, 1], got {decay}")
        self.numel = numel
        self.decay = decay  # β: the residual's weight in the next encoding
        self.residual = np.zeros(numel, dtype=np.float32)
        self.staged: np.ndarray | None = None  # the residual of the payload last encoded, until it is settled
        self._spare: np.ndarray | None = None  # last committed-over buffer, reused by the next encode

    def encode(
        self, codec: Codec, delta: np.ndarray, *, frame_elems: int = DEFAULT_FRAME_ELEMS, cuts: Sequence[int] = ()
    ) -> tuple[bytes, Iterator[bytes]]:
        """Encode delta + β·residual; what this encoding loses is staged, to `commit` once the PS takes it."""
        if not isinstance(delta, np.ndarray) or delta.shape != (self.numel,) or delta.dtype != np.float32:
            raise CodecError(f"delta must be a float32 array of shape ({self.numel},)")
        if self.decay == 1.0:
            corrected = delta + self.residual  # the frames read this lazily; it lives as long as they do
        else:
            corrected = np.float32(self.decay) * self.residual
            corrected += delta
        staged = self._spare if self._spare is not None else np.empty(self.numel, dtype=np.float32)
        self._spare = None
        out = codec.encode(corrected, frame_elems=frame_elems, residual_out=staged, **({"cuts": cuts} if cuts else {}))
        self.staged = staged
        return out

    def commit(self) -> None:
        """The PS took the last encoded payload: its quantisation error becomes the residual."""
        if self.staged is None:
            return
        self._spare, self.residual, self.staged = self.residual, self.staged, None

    def discard(self) -> None:
        """The PS refused the last encoded payload: keep the residual as it was before encoding it."""
        if self.staged is not None:
            self._spare, self.staged = self.staged, None

    def reset(self) -> None:
        """Forget the residual (e.g. after the client re-syncs to a fresh global model)."""
        self.residual.fill(0)
        self.discard()

    def state_dict(self) -> dict[str, Any]:
        """{"residual": tensor[, "staged": tensor]} sharing memory; loadable with torch.load(weights_only=True).

        "staged" is present while a payload is unsettled (a checkpoint written before its push).
        """
        import torch

        state = {"residual": torch.from_numpy(self.residual)}
        if self.staged is not None:
            state["staged"] = torch.from_numpy(self.staged)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from `state_dict()` output (torch tensors or numpy arrays)."""
        if "residual" not in state or not set(state) <= {"residual", "staged"}:
            raise CodecError(
                f"error-feedback state must have exactly the key 'residual' (and 'staged'), got {sorted(state)}"
            )
        self.residual = self._checked(state["residual"], "residual")
        self.staged = self._checked(state["staged"], "staged residual") if "staged" in state else None

    def _checked(self, value: Any, what: str) -> np.ndarray:
        arr = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        if arr.shape != (self.numel,) or arr.dtype != np.float32:
            raise CodecError(f"{what} must be float32 of shape ({self.numel},), got {arr.dtype} {arr.shape}")
        if not np.isfinite(arr).all():
            raise CodecError(f"{what} contains non-finite values")
        return np.array(arr, dtype=np.float32, copy=True)
