"""Pretraining in the sparse mode (SparseLoCo, Sarfi et al. 2025): clients push chunk-wise
top-k deltas with low-bit values (`geofed.codec.sparse`) carrying the rest in their error feedback.

- Fold: only each push's nonzeros are added into the round's running sum (work O(nonzeros), memory
  O(model): one sum, never a per-client dense copy); a payload outside the federation's sparse settings
  (denser, more bits, or not sparse) is refused before anything of it is added.
- Apply: the outer step's increment is re-sparsified with the same codec before it is published, the
  remainder kept in a server-side error-feedback residual (β = 1, nothing lost, only delayed). The union
  of K clients' top-k is up to K× denser than each; re-sparsifying keeps the downlink as small as the
  uplink, and the published model is by definition the sum of the sparse increments, so every client
  rebuilds it bit for bit from the same bytes (`geofed.codec.sparse_increments`).
"""

from __future__ import annotations

import numpy as np

from geofed.codec.header import parse_header
from geofed.codec.sparse import SparseCodec, policy_violation, sparse_params
from geofed.codec.sparse_increments import apply_increment, pack_increment
from geofed.config import FederationConfig

from ...errors import InvalidPush
from ...global_model import Manifest, Snapshot
from ..accumulator import DeltaAccumulator
from ..sparse_downlink import SparseStream
from ..strategy import Accumulator, Payload, RoundSum
from .pretrain import Pretrain


class SparsePretrain(Pretrain):
    """`Pretrain` with sparse folding and a sparse model stream: pretraining's strategy for sparse deltas."""

    centred_clipping = False  # sparse payloads: mixing in a dense centre would undo the sparsity

    def __init__(self, fed: FederationConfig) -> None:
        super().__init__(fed)
        if self.cfg.robust != "none":
            raise ValueError("codec 'sparse' sums deltas sparsely; robust aggregation needs dense order "
                             f"statistics (aggregation.robust={self.cfg.robust!r}): use robust 'none' with it")
        self.codec = SparseCodec(sparse_params(fed.codec))
        self.stream = SparseStream(fed.downlink.history)
        self.server_residual: np.ndarray | None = None

    def install(self, numel: int, manifest: Manifest) -> None:
        super().install(numel, manifest)
        self.server_residual = np.zeros(numel, dtype=np.float32)
        self.stream.clear()

    def check_payload(self, push: Payload) -> None:
        why = policy_violation(parse_header(push.header.codec_header).name, self.fed.codec)
        if why is not None:
            raise InvalidPush("codec_policy", why)

    def add_payload(self, acc: Accumulator, push: Payload, scale: float) -> None:
        assert isinstance(acc, DeltaAccumulator)
        s = np.float32(scale)
        for pos, values in push.iter_sparse(acc.numel):  # positions are unique within a push (validated)
            acc.sum[pos] += s * values

    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        """ϕ_new = ϕ + Q(topk(e)), e = server residual + outer(mean δ); built in the round sum's buffer."""
        assert self.outer is not None and self.server_residual is not None, "install() first"
        update = round_sum.delta
        self.outer_step_(update)
        update += self.server_residual
        header, frames = self.codec.encode(update, residual_out=self.server_residual)
        increment = pack_increment(header, frames)  # frames are built: `update` may be overwritten now
        np.copyto(update, snapshot.flat)
        apply_increment(update, increment)
        self.stream.record(snapshot.version + 1, increment)
        return update

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.server_residual is not None:
            state["server_residual"] = self.server_residual
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        saved = state.get("server_residual")
        if saved is not None and self.server_residual is not None and np.shape(saved) == self.server_residual.shape:
            self.server_residual = np.asarray(saved, dtype=np.float32).copy()
