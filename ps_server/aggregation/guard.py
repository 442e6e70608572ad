"""What the PS enforces on every delta before any strategy sees it (issue 10): one hostile client holding a
valid token must not be able to move or break the global model, whatever it sends.

- **Server-vouched weights**: local steps are credited at most the federation's H, and tokens at most
  batch × block_size per credited step (so at most `weighting.max_tokens_per_sync` per delta, and FedNova's
  tokens per step never beyond one batch: a client cannot buy weight by declaring few steps).
- **One delta per client per base version and per round**: a client's accepted base versions must
  increase (an honest client trains each delta from a newer model than its last), and a client holds at
  most one delta in the open round; anything else is refused (`AlreadySent`). Without this one client
  could fill a round, or re-send against one base version, to multiply its influence.
- **A norm bound** (`norm_bound.NormBound`), applied to the decoded update.

Strategies get all of it for free: the Aggregator calls `admit` / `bound` / `accepted` around `fold`.
Plain Python over numpy, no gRPC.
"""

from __future__ import annotations

import math

import numpy as np

from geofed.config import FederationConfig

from ..errors import AlreadySent
from ..global_model import Snapshot
from .norm_bound import BoundedPayload, NormBound, adamw_ceiling
from .weighting import max_tokens_per_sync


class DeltaGuard:
    """Admission rules and bounds every strategy shares; O(clients) state."""

    def __init__(self, fed: FederationConfig) -> None:
        self.fed = fed
        self.max_steps = fed.training.local_steps
        self.tokens_per_step = max_tokens_per_sync(fed) // self.max_steps  # batch × block_size
        self.norms = NormBound(fed.aggregation.norm_bound_multiple, fed.aggregation.norm_bound_window)
        self.applied_base: dict[str, int] = {}  # client -> newest base version of its applied deltas
        self.round_base: dict[str, int] = {}  # client -> base version of its delta in the open round
        self._ceiling: tuple[int, float] | None = None  # (version, ceiling) cache

    # ---- weights --------------------------------------------------------------------------------

    def vouched_tokens(self, declared: int, declared_steps: int) -> int:
        return min(max(0, declared), self.tokens_per_step * self.vouched_steps(declared_steps))

    def vouched_steps(self, declared: int) -> int:
        return min(max(1, declared), self.max_steps)

    # ---- once per base version / round ----------------------------------------------------------

    def admit(self, client_id: str, base_version: int) -> None:
        """Refuse (AlreadySent) a second delta of `client_id` in this round or on a base it already used."""
        if client_id in self.round_base:
            raise AlreadySent(
                "already_sent", f"this client already has a delta (on base version {self.round_base[client_id]}) "
                "in the open round: one delta per client per round; wait for the next version"
            )
        last = self.applied_base.get(client_id)
        if last is not None and base_version <= last:
            raise AlreadySent(
                "already_sent", f"this client already sent a delta on base version {last}; a new delta must be "
                f"trained from a newer version (got base version {base_version})"
            )

    def accepted(self, client_id: str, base_version: int, norm: float) -> None:
        """A (bounded) delta of `client_id` went into the open round."""
        self.round_base[client_id] = base_version
        self.norms.record(client_id, norm)

    def round_closed(self, applied: bool) -> None:
        """The open round became a version (or was dropped): its clients' bases move to the applied table."""
        if applied:
            for client_id, base in self.round_base.items():
                self.applied_base[client_id] = max(base, self.applied_base.get(client_id, 0))
        self.round_base = {}

    # ---- norm bound -----------------------------------------------------------------------------

    def ceiling(self, snapshot: Snapshot, numel: int) -> float:
        """The most an honest AdamW client can move the exchanged vector in one sync (see norm_bound)."""
        if self._ceiling is None or self._ceiling[0] != snapshot.version:
            t = self.fed.training
            theta_norm = float(np.linalg.norm(snapshot.flat.astype(np.float64))) if t.weight_decay else 0.0
            self._ceiling = (snapshot.version, adamw_ceiling(
                lr=t.lr, local_steps=t.local_steps, numel=numel, weight_decay=t.weight_decay, theta_norm=theta_norm,
                beta1=t.adam_beta1, beta2=t.adam_beta2))
        return self._ceiling[1]

    def bound(self, push, snapshot: Snapshot) -> BoundedPayload:
        """The push as the strategy may fold it: scaled down to the norm bound."""
        ceiling = self.ceiling(snapshot, push.numel) if self.norms.enabled else math.inf
        return BoundedPayload(push, self.norms.scale(push.norm, ceiling))

    # ---- durability -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Applied bases and recent norms; the open round's bases go with its (unpersisted) deltas."""
        return {"applied_base": dict(self.applied_base), "norms": self.norms.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.applied_base = {str(k): int(v) for k, v in state.get("applied_base", {}).items()}
        self.norms.load_state_dict(state.get("norms", []))
        self.round_base, self._ceiling = {}, None


def all_finite(a: np.ndarray, slice_elems: int = 1 << 22) -> bool:
    """True when no element is NaN or ±Inf; checked slice by slice (temporaries O(slice), not O(model))."""
    flat = a.reshape(-1)
    return all(bool(np.isfinite(flat[i : i + slice_elems]).all()) for i in range(0, flat.size, slice_elems))
