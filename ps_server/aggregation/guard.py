"""What the PS enforces on every delta before any strategy sees it: one hostile site holding valid
credentials must not be able to move or break the global model, whatever it sends through however many
client ids.

- **The site is the unit of trust.** Every rule below counts sites, not client ids: the client ids a site
  credential mints (`<site>.<name>`) share their site's quota and its norm history. A client admitted by the
  federation admin without a site is its own unit.
- **Server-vouched weights**: local steps are credited at most the federation's H, and tokens at most
  batch × block_size per credited step (so at most `weighting.max_tokens_per_sync` per delta, and FedNova's
  tokens per step never beyond one batch: a client cannot buy weight by declaring few steps).
- **One delta per site per base version and per round**: a site's accepted base versions must increase
  (an honest client trains each delta from a newer model than its last), and a site holds at most one delta
  in the open round; anything else is refused (`AlreadySent`: reason `already_sent` for the same client id,
  `site_quota` for another client id of the same site). Without this one site could fill a round, or re-send
  against one base version, to multiply its influence.
- **A norm bound** (`norm_bound.NormBound`), applied to the decoded update; under FedNova to the delta as the
  round will apply it (‖δ‖ · H / τ), so declaring few local steps buys no length.
- **A consensus bound** (`consensus.ConsensusBound`): a delta's component along the other sites' recent
  directions (the upper median of its projections) may not be below −0.1 × its site's reference norm, so a
  site cannot undo what the others train (a sign flip) at the norm bound; where the outer optimizer says honest
  deltas agree (`OuterSpec.deltas_agree`: FedAvg and Adam, not Nesterov with momentum).
- **A displacement budget** (`displacement.DisplacementBudget`): what a site's latest deltas add up to is
  bounded too, so a drift just under the norm bound in one direction stops adding up.
- **A site's share of a round**: in async mode every push makes a version and a site's base versions only
  have to increase, so a site could push again on the version its own delta made (through one client id or
  several) and land many bounded deltas while the other sites train one each. A site's deltas in its current
  round (those since which fewer deltas of other sites arrived than there are other sites active within the
  default server.client_timeout_s), with the new one, are at most ⌈multiple⌉ (2) and their sum (its length
  from the deltas' count sketches as folded) is within the site's bound; a delta that would go beyond is
  refused (`RoundShareSpent`, reason `round_share`), not scaled, so every delta that lands is whole (or
  bounded by the norm bound alone) and no near-empty version lets momentum step the model. An honest site
  lands about one delta per round; one that pushes several times while the others train lands up to 2,
  as long as they add up to its bound (honest deltas share part of their direction, so 2 of median size
  usually do), and then waits for the others (its client drops the refused delta, as a stale one, and
  retrains on the next version). In sync mode the rule does not apply: a round is explicit there, and the
  site quota holds a site to one delta in it.
  `aggregation.round_share` turns the rule off.

The norm bound, the consensus bound, the displacement budget and the round share are rules (`rules/`, one
file each, behind `rules.Rule`): `bound` runs them in `rules.BUILT_IN`'s order, then any rule a plug-in
declares. The guard keeps what they read (the sites' norms, sketches and recent deltas) and records an
accepted delta in it. Strategies get all of it for free: the Aggregator calls `admit` / `bound` / `accepted`
around `fold`.
Plain Python over numpy, no gRPC.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from geofed.config import FederationConfig, ServerConfig

from ..errors import AlreadySent
from ..global_model import Snapshot
from .consensus import ConsensusBound
from .displacement import OVER_NORM_BOUND, WINDOW, DisplacementBudget
from .norm_bound import BoundedPayload, NormBound, adamw_ceiling, start_bound
from .rules import Delta, ordered_rules
from .weighting import max_tokens_per_sync


class DeltaGuard:
    """Admission rules and bounds every strategy shares; O(sites) state."""

    def __init__(
        self,
        fed: FederationConfig,
        unit_of: Callable[[str], str] | None = None,
        *,
        theta_norm: Callable[[Snapshot], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        active_for_s: float = ServerConfig.model_fields["client_timeout_s"].default,
        present: Callable[[str], bool] | None = None,
    ) -> None:
        self.fed = fed
        self._theta_norm = theta_norm  # ‖θ‖ of a snapshot, where the engine knows it better than its values
        self.unit_of = unit_of or (lambda client_id: client_id)  # client id -> its site (the unit of trust)
        self.max_steps = fed.training.local_steps
        self.tokens_per_step = max_tokens_per_sync(fed) // self.max_steps  # batch × block_size
        agg = fed.aggregation
        self.norms = NormBound(agg.norm_bound_multiple, agg.norm_bound_window)
        self.round_deltas = max(1, math.ceil(agg.norm_bound_multiple))  # a site's deltas in one round, at most
        # A paradigm whose rounds' updates lie along each round's own directions: their sum means nothing.
        self.budget = DisplacementBudget(
            OVER_NORM_BOUND * agg.norm_bound_multiple if fed.paradigm.cumulative else 0.0, agg.norm_bound_window
        )
        self.consensus = ConsensusBound(self.budget, enabled=agg.deltas_agree)
        self._sketches: dict[str, np.ndarray] = {}  # client -> sketch of its bounded delta, until accepted
        self.applied_base: dict[str, int] = {}  # site -> newest base version of its applied deltas
        self.round_base: dict[str, tuple[str, int]] = {}  # site -> (client, base version) of its open-round delta
        self._limits: tuple[int, float, float] | None = None  # (version, ceiling, start) cache
        self._recent_sites: deque[str] = deque(maxlen=4 * WINDOW)  # the site of each recent accepted delta
        self.clock, self.active_for_s = clock, active_for_s  # a site silent longer than active_for_s has left
        self._landed_at: dict[str, float] = {}  # site -> clock() when its latest delta was accepted
        # Whether a site has a client taking part now (on a PS: one that called it within the last heartbeats);
        # every site, where unknown.
        self.present = present or (lambda site: True)
        self.rules = tuple(cls() for cls in ordered_rules())  # what every delta passes, in turn (`rules`)

    # ---- weights --------------------------------------------------------------------------------

    def vouched_tokens(self, declared: int, declared_steps: int) -> int:
        return min(max(0, declared), self.tokens_per_step * self.vouched_steps(declared_steps))

    def vouched_steps(self, declared: int) -> int:
        return min(max(1, declared), self.max_steps)

    # ---- once per base version / round ----------------------------------------------------------

    def admit(self, client_id: str, base_version: int) -> None:
        """Refuse (AlreadySent) a second delta of `client_id`'s site in this round or on a base it already used."""
        site = self.unit_of(client_id)
        if site in self.round_base:
            holder, base = self.round_base[site]
            if holder == client_id:
                raise AlreadySent(
                    "already_sent",
                    f"this client already has a delta (on base version {base}) in the open round: "
                    "one delta per site per round; wait for the next version",
                )
            raise AlreadySent(
                "site_quota",
                f"site quota: client {holder!r} of site {site!r} already has a delta (on base version "
                f"{base}) in the open round; one delta per site per round, shared by all its client ids",
            )
        last = self.applied_base.get(site)
        if last is not None and base_version <= last:
            raise AlreadySent(
                "already_sent" if site == client_id else "site_quota",
                f"site quota: site {site!r} already sent a delta on base version {last}; a new delta must be "
                f"trained from a newer version (got base version {base_version})",
            )

    def accepted(self, client_id: str, base_version: int, norm: float, local_steps: int = 1) -> None:
        """A (bounded) delta of `client_id`, of L2 norm `norm`, went into the open round."""
        site = self.unit_of(client_id)
        self.round_base[site] = (client_id, base_version)
        self.norms.record(site, self.bound_norm(norm, local_steps))
        self._recent_sites.append(site)
        self._landed_at[site] = self.clock()
        sketch = self._sketches.pop(client_id, None)
        if sketch is not None:
            self.budget.record(site, sketch)

    def round_closed(self, applied: bool) -> None:
        """The open round became a version (or was dropped): its sites' bases move to the applied table."""
        if applied:
            for site, (_, base) in self.round_base.items():
                self.applied_base[site] = max(base, self.applied_base.get(site, 0))
        self.round_base = {}

    def in_round(self, site: str) -> int:
        """How many of `site`'s latest deltas are in its current round: those since which fewer deltas of
        other sites were accepted than there are other active sites (sites with a norm entry whose latest delta
        landed within `active_for_s`, server.client_timeout_s's default, and that are `present` now: a site
        that left, or whose clients all stopped calling the PS, holds no one's round open)."""
        horizon = self.clock() - self.active_for_s
        others_needed = sum(
            1
            for s in self.norms.norms
            if s != site and self._landed_at.get(s, -math.inf) >= horizon and self.present(s)
        )
        own = others = 0
        for s in reversed(self._recent_sites):
            if others >= others_needed:
                break
            if s == site:
                own += 1
            else:
                others += 1
        return own

    # ---- norm bound -----------------------------------------------------------------------------

    def theta_norm(self, snapshot: Snapshot) -> float:
        """‖θ‖ of the exchanged vector, when weight decay makes the bounds depend on it."""
        if not self.fed.training.weight_decay:
            return 0.0
        if self._theta_norm is not None:
            return self._theta_norm(snapshot)
        return float(np.linalg.norm(snapshot.flat.astype(np.float64)))

    def limits(self, snapshot: Snapshot, numel: int) -> tuple[float, float]:
        """(ceiling, start): the most an honest client can move the exchanged vector in one sync, and the
        bound of a federation's first deltas (see norm_bound)."""
        if self._limits is None or self._limits[0] != snapshot.version:
            fixed = self.fed.paradigm.update_ceiling(self.fed.model)  # e.g. scalars, which no optimizer step bounds
            if fixed is not None:
                ceiling = start = fixed
            else:
                t, theta_norm = self.fed.training, self.theta_norm(snapshot)
                ceiling = adamw_ceiling(
                    lr=t.lr,
                    local_steps=t.local_steps,
                    numel=numel,
                    weight_decay=t.weight_decay,
                    theta_norm=theta_norm,
                    beta1=t.adam_beta1,
                    beta2=t.adam_beta2,
                )
                start = start_bound(t, numel, theta_norm)
            self._limits = (snapshot.version, ceiling, start)
        return self._limits[1], self._limits[2]

    def bound_norm(self, norm: float, local_steps: int) -> float:
        """The length the bound measures: under FedNova the delta as the round applies it (at most ‖δ‖·H/τ)."""
        if self.fed.aggregation.fednova:
            return norm * self.max_steps / self.vouched_steps(local_steps)
        return norm

    def scale(self, client_id: str, norm: float, local_steps: int, snapshot: Snapshot, numel: int) -> float:
        """Factor (≤ 1) that brings a delta of `client_id` within its site's bound."""
        if not self.norms.enabled:
            return 1.0
        ceiling, start = self.limits(snapshot, numel)
        return self.norms.scale(self.unit_of(client_id), self.bound_norm(norm, local_steps), ceiling, start)

    def bound(self, push, snapshot: Snapshot, mode: str = "async") -> BoundedPayload:
        """The push as the strategy may fold it: through every rule in turn (`self.rules`), scaled down by
        each factor below 1; refused (the rule's `refusal`, e.g. `RoundShareSpent`) by the first rule that
        refuses it, in the live aggregation `mode`."""
        site = self.unit_of(push.client_id)
        sketch = getattr(push, "sketch", None)
        if sketch is not None and self.budget.enabled:
            sketch = sketch * self.bound_norm(1.0, push.header.local_steps)  # as the round applies it
        else:
            sketch = None
        delta = Delta(push, site, snapshot, mode, sketch)
        for rule in self.rules:
            verdict = rule.check(delta, self)
            if verdict.refused:
                raise rule.refusal(verdict.reason, verdict.message)
            if verdict.scale < 1.0:
                delta.scaled(verdict.scale, rule)
        if delta.sketch is not None:
            self._sketches[push.client_id] = delta.sketch
        return BoundedPayload(push, delta.scale, site, delta.rule, history_norm=push.norm * delta.length_scale)

    # ---- durability -----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Applied bases and recent norms; the open round's bases go with its (unpersisted) deltas, and the
        displacement windows (256 kB a site, written with every version) start empty after a restart."""
        return {"applied_base": dict(self.applied_base), "norms": self.norms.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.applied_base = {str(k): int(v) for k, v in state.get("applied_base", {}).items()}
        self.norms.load_state_dict(state.get("norms", []))
        self.round_base, self._limits = {}, None


def all_finite(a: np.ndarray, slice_elems: int = 1 << 22) -> bool:
    """True when no element is NaN or ±Inf; checked slice by slice (temporaries O(slice), not O(model))."""
    flat = a.reshape(-1)
    return all(bool(np.isfinite(flat[i : i + slice_elems]).all()) for i in range(0, flat.size, slice_elems))
