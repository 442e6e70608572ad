"""Zeroth-order fine-tuning, server half: average one scalar per seed, step along the seeded directions.

A round's payload is `seeds` scalars; their weighted mean ḡ moves the global vector by
θ ← θ − (lr / seeds)·Σₖ ḡₖ zₖ with the directions of the round's base version (`geofed.zo`, numpy's
Philox: the same bytes a client's torch process regenerates). A scalar computed on another version's
directions is meaningless here, so a stale payload is taken (ACCEPTED) but not folded. The downlink to
a client holding a version still in `history` is the scalars of the rounds since (4·seeds bytes each);
anyone else gets the whole vector once.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from geofed import zo

from ...global_model import Manifest, Snapshot
from ..accumulator import DeltaAccumulator
from ..downlink import Downlink, full_downlink
from ..rounds import Admission
from ..strategy import Accumulator, Payload, RoundSum, Strategy
from ..weighting import base_weight

ENCODING = "zo_scalars"


class ZO(Strategy):
    """The weighted mean of the seeds' scalars, stepped along the round's seeded directions."""

    def __init__(self, fed) -> None:
        super().__init__(fed)
        self.settings = fed.paradigm
        self.history: OrderedDict[int, np.ndarray] = OrderedDict()  # version -> the ḡ that made it

    def install(self, numel: int, manifest: Manifest) -> None:
        self.history.clear()

    def payload_numel(self, snapshot: Snapshot) -> int:
        return self.settings.seeds

    def open_round(self, snapshot: Snapshot) -> Accumulator:
        return DeltaAccumulator(self.settings.seeds)

    def fold(self, acc: Accumulator, push: Payload, admission: Admission, *, num_tokens: int,
             local_steps: int) -> float:
        if admission.staleness:
            return 0.0  # scalars along another version's directions
        weight = base_weight(self.cfg, num_tokens, local_steps)
        for off, values in push.iter_values(acc.numel):
            acc.add(off, values, weight)
        acc.commit(push.client_id, weight, local_steps)
        return weight

    def close(self, acc: Accumulator) -> RoundSum:
        mean = acc.mean_(False)
        acc.close()
        return RoundSum(mean, acc.count, frozenset(acc.clients), acc.weight)

    def apply(self, snapshot: Snapshot, round_sum: RoundSum) -> np.ndarray:
        s = self.settings
        gbar = np.array(round_sum.delta, dtype=np.float32)
        flat = zo.step_(np.array(snapshot.flat, dtype=np.float32), gbar, seed=s.seed, version=snapshot.version,
                        lr=s.lr)
        self.history[snapshot.version + 1] = gbar
        while len(self.history) > s.history:
            self.history.popitem(last=False)
        return flat

    def downlink(self, snapshot: Snapshot, have_version: int = 0) -> Downlink:
        versions = range(have_version + 1, snapshot.version + 1)
        if have_version < 1 or not versions or any(v not in self.history for v in versions):
            return full_downlink(snapshot)
        scalars = np.concatenate([self.history[v] for v in versions]).astype(np.float32)
        return Downlink(snapshot.version, ENCODING, memoryview(scalars.view(np.uint8)), snapshot.sha256,
                        snapshot.manifest, base_version=have_version)

    def state_dict(self) -> dict:
        return {"history": {str(v): [float(x) for x in g] for v, g in self.history.items()}}

    def load_state_dict(self, state: dict) -> None:
        saved = sorted((int(v), g) for v, g in state.get("history", {}).items())
        self.history = OrderedDict((v, np.array(g, dtype=np.float32)) for v, g in saved)
