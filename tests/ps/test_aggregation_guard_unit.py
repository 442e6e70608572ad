"""The PS's defences in process (issue 10), and robust aggregation against an independent reference (issue 17).

Each test drives a real `Aggregator` with in-memory pushes; expected models are recomputed here with plain
numpy from the rules as written in the docs, not with the PS's own helpers.
"""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig, TrainingConfig
from geofed_testing.events import EventLog
from ps_server.aggregation.aggregator import Aggregator
from ps_server.aggregation.events import RoundDropped
from ps_server.aggregation.norm_bound import NormBound
from ps_server.aggregation.sites import FixedSites
from ps_server.errors import AlreadySent, InvalidPush, RoundShareSpent
from ps_server.global_model import GlobalModel, TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush

N = 400


class _Push(ReceivedPush):
    """A received push whose values come from memory (the aggregator only iterates them)."""

    def __init__(self, client, values, *, tokens=1, base=1, upload=None, steps=1):
        self.client_id, self._values, self.numel, self.codec_name = client, values, values.size, "fp32"
        self.norm = float(np.linalg.norm(values.astype(np.float64)))
        self.header = PushHeader(
            base_version=base,
            upload_id=upload or f"{client}/{base}/{tokens}",
            codec_header=b"",
            payload_bytes=0,
            num_tokens=tokens,
            local_steps=steps,
        )

    def iter_values(self, max_numel):
        for off in range(0, self.numel, 128):  # pieces, as the streaming decoder yields them
            yield off, self._values[off : off + 128]

    def close(self):
        pass


class _Sketched(_Push):
    """A push with the count sketch the ingest decode builds while it validates a payload. The real push is
    decoded from wire frames as it streams in and sketched piece by piece; this one holds its values in memory
    and sketches them whole (the same sketch: a sum over pieces)."""

    def __init__(self, client, values, **kw):
        from ps_server.aggregation.displacement import DeltaSketch

        super().__init__(client, values, **kw)
        sketch = DeltaSketch()
        sketch.add(values)
        self.sketch = sketch.values


def _aggregator(*, version=1, lr=1e-3, events=None, **agg) -> Aggregator:
    # Pinned training settings: batch 16 × block 128 × H 50 tokens per sync, AdamW ceiling 1.1·lr·50·√N
    training = TrainingConfig(lr=lr, batch_size=16, local_steps=50, adam_beta1=0.9, adam_beta2=0.95)
    fed = FederationConfig(aggregation=AggregationConfig(**agg), training=training)
    a = Aggregator(fed, GlobalModel(), sites=FixedSites(4), observers=() if events is None else (events,))
    a.restore(version, np.zeros(N, np.float32), (TensorEntry("w", (N,), "float32"),), {})
    return a


def _honest(seed: int, rms: float = 0.01) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(N) * rms).astype(np.float32)


def _model(a: Aggregator) -> np.ndarray:
    return a.model.current().flat.copy()


# ---- server-vouched weights ----------------------------------------------------------------------


def test_a_declared_token_count_is_credited_at_most_one_sync_worth():
    # Prepare: batch 16 × block 128 × 50 local steps is the most one sync can hold
    a = _aggregator(mode="sync", quorum=0.5, weighting="tokens", global_lr=1.0)  # 2 of 4 close the round
    cap = 16 * 128 * 50
    h, evil = _honest(1), _honest(2)

    # Execute
    honest_w = a.submit(_Push("h", h, tokens=cap, steps=50)).weight
    evil_w = a.submit(_Push("evil", evil, tokens=2**64 - 1, steps=2**32 - 1)).weight

    # Assert: equal say, and the model is their plain mean
    assert honest_w == evil_w == cap
    np.testing.assert_allclose(_model(a), (h + evil) / 2, rtol=1e-5, atol=1e-7)


def test_declaring_few_local_steps_buys_no_fednova_weight():
    a = _aggregator(mode="sync", quorum=0.5, weighting="tokens", fednova=True)
    per_step = 16 * 128  # one batch of sequences of block_size tokens

    honest_w = a.submit(_Push("h", _honest(1), tokens=50 * per_step, steps=50)).weight
    evil_w = a.submit(_Push("evil", _honest(2), tokens=2**64 - 1, steps=1)).weight

    assert honest_w == evil_w == per_step  # tokens per step, each at most one batch


# ---- one delta per client per base version / round -----------------------------------------------


def test_a_second_delta_in_one_sync_round_is_refused_and_changes_nothing():
    a = _aggregator(mode="sync", weighting="uniform", global_lr=1.0)
    a.submit(_Push("evil", _honest(1), base=1, upload="first"))

    with pytest.raises(AlreadySent, match="one delta per site per round"):
        a.submit(_Push("evil", _honest(2), base=1, upload="second"))
    with pytest.raises(AlreadySent):  # refused before the payload crosses the WAN too
        a.precheck("evil", _Push("evil", _honest(2), base=1, upload="third").header, master=False)

    assert a.buffered == 1 and a.model.version == 1


def test_eight_deltas_against_one_base_version_land_once():
    a = _aggregator(mode="async", buffer_size=1, weighting="uniform", global_lr=1.0)
    deltas = [_honest(i) for i in range(8)]
    outcomes, refused = [], 0
    for i, d in enumerate(deltas):
        try:
            outcomes.append(a.submit(_Push("evil", d, base=1, upload=f"u{i}")))
        except AlreadySent:
            refused += 1

    assert [o.status for o in outcomes] == ["APPLIED"] and refused == 7
    np.testing.assert_allclose(_model(a), deltas[0], rtol=1e-6)
    with pytest.raises(AlreadySent, match="newer version"):  # an older base is no way around it
        a.submit(_Push("evil", _honest(9), base=0 + 1, upload="older"))
    assert a.submit(_Push("evil", _honest(10), base=2, upload="next")).status == "APPLIED"  # a new base is fine


def test_applied_bases_survive_a_checkpoint():
    a = _aggregator(mode="async", buffer_size=1, weighting="uniform")
    a.submit(_Push("evil", _honest(1), base=1))
    state = a.state_dict()
    b = _aggregator(mode="async", buffer_size=1, weighting="uniform", version=2)
    b.restore(2, _model(a), a.model.current().manifest, state)

    with pytest.raises(AlreadySent):
        b.submit(_Push("evil", _honest(2), base=1, upload="after-restart"))


# ---- the norm bound ------------------------------------------------------------------------------


def test_norm_bound_of_a_site_is_the_median_of_the_other_sites_and_never_its_own():
    bound = NormBound(multiple=3.0, window=4)
    assert bound.limit("a", ceiling=100.0, start=10.0) == 10.0  # the federation's first delta: the start bound
    bound.record("a", 2.0)
    assert bound.limit("a", 100.0, 10.0) == pytest.approx(6.0)  # alone: 3 × its own history, within start
    assert bound.limit("b", 100.0, 10.0) == pytest.approx(6.0)  # another site: 3 × a's norm
    for n in (50.0, 50.0):  # a ratchets its own history up ...
        bound.record("a", n)
    bound.record("b", 1.0)
    assert bound.limit("a", 100.0, 10.0) == pytest.approx(3.0)  # ... but once b has pushed, b's norms bound a
    assert bound.limit("b", 1000.0, 10.0) == pytest.approx(3 * 50.0)  # a's entry: the median of 2, 50, 50
    bound.record("c", 4.0)
    assert bound.limit("a", 100.0, 10.0) == pytest.approx(3 * 2.5)  # median over b and c
    for s in "defg":
        bound.record(s, 1.0)
    assert list(bound.norms) == ["d", "e", "f", "g"] and bound.limit("x", 100.0) == pytest.approx(3.0)
    assert bound.limit("x", ceiling=2.0) == 2.0  # never above the ceiling


def test_first_delta_of_a_federation_is_bounded_by_the_start_bound():
    a = _aggregator(mode="async", buffer_size=1, global_lr=1.0)
    evil = np.full(N, 1e17, np.float32)

    a.submit(_Push("evil", evil, tokens=2**64 - 1))

    start = 2 * 1.1 * 1e-3 * np.sqrt(50) * np.sqrt(N)  # 2 × lr × √H × √n, +10%
    assert np.linalg.norm(_model(a)) == pytest.approx(start, rel=1e-5)


@pytest.mark.parametrize("outer", ["fedavg", "nesterov", "adam"])
@pytest.mark.parametrize("attack", [1e6, 1e17, 1.845e19, "1000x"])
def test_an_attack_after_honest_rounds_moves_the_model_a_small_multiple_of_an_honest_step(outer, attack):
    a = _aggregator(mode="async", buffer_size=1, outer_optimizer=outer, global_lr=0.5)
    steps, base = [], 1
    for r in range(3):
        for i in range(3):
            before = _model(a)
            base = a.submit(_Push(f"h{i}", _honest(10 * r + i), base=base, tokens=1000)).version
            steps.append(np.linalg.norm(_model(a) - before))
    before = _model(a)
    evil = 1000 * _honest(99) if attack == "1000x" else np.where(np.arange(N) % 2, attack, -attack).astype(np.float32)

    a.submit(_Push("evil", evil, base=base, tokens=2**64 - 1))
    attacked = _model(a)
    base += 1
    for i in range(3):  # momentum carries the attack on: the next honest steps must stay bounded too
        prev = _model(a)
        base = a.submit(_Push(f"h{i}", _honest(50 + i), base=base, tokens=1000)).version
        steps.append(np.linalg.norm(_model(a) - prev))
        assert np.isfinite(_model(a)).all()

    honest_step = max(steps[:9])
    assert np.isfinite(attacked).all()
    assert np.linalg.norm(attacked - before) <= 6 * honest_step
    assert max(steps[9:]) <= 6 * honest_step


# ---- nothing non-finite --------------------------------------------------------------------------


def test_with_the_bound_off_a_delta_that_could_overflow_the_round_sum_is_refused():
    a = _aggregator(mode="sync", weighting="tokens", norm_bound_multiple=0)
    a.submit(_Push("h", _honest(1), tokens=1000))

    with pytest.raises(InvalidPush, match="overflow"):  # 3e38 × a full sync's tokens is beyond float32
        a.submit(_Push("evil", np.full(N, 3e38, np.float32), tokens=2**64 - 1))

    assert a.buffered == 1 and a.model.version == 1
    assert a.submit(_Push("h2", _honest(2), tokens=1000)).status == "ACCEPTED"


def test_a_round_that_would_publish_a_non_finite_model_is_dropped_and_the_version_kept():
    events = EventLog()
    a = _aggregator(mode="async", buffer_size=1, events=events)
    a.model.publish(1, np.full(N, 3e38, np.float32), a.model.current().manifest)
    a.strategy.outer.lr = float("inf")  # fault injection: an outer step that overflows (the bounds make it unreachable)
    before = _model(a)

    with pytest.raises(InvalidPush, match="non-finite"):
        a.submit(_Push("c", _honest(1)))

    assert a.model.version == 1 and np.array_equal(_model(a), before)
    assert [e.reason for e in events.of(RoundDropped)] == ["nonfinite_round"]


# ---- robust aggregation over a window (issue 17) -------------------------------------------------


def _reference_window_step(
    entries: dict,
    version: int,
    method: str,
    *,
    exponent: float,
    max_staleness: int,
    trim: float,
    accept_late: bool = False,
) -> np.ndarray:
    """What the robust update should be: order statistics over each client's latest, staleness-weighted delta."""
    rows = []
    for delta, base in entries.values():
        s = version - base
        if s > max_staleness:
            continue
        rows.append(delta.astype(np.float64) * (1.0 if accept_late else (1 + s) ** -exponent))
    stack = np.sort(np.array(rows), axis=0)
    if method == "median":
        return np.median(stack, axis=0)
    k = int(trim * len(rows))
    return stack[k : len(rows) - k].mean(axis=0)


@pytest.mark.parametrize("method", ["median", "trimmed_mean"])
def test_async_robust_window_matches_the_reference_with_staleness_and_one_entry_per_client(method):
    cfg = {
        "mode": "async",
        "buffer_size": 1,
        "robust": method,
        "trim_fraction": 0.25,
        "global_lr": 0.5,
        "staleness_exponent": 0.5,
        "max_staleness": 3,
        "norm_bound_multiple": 0,
        "robust_window": 4,
    }
    a = _aggregator(**cfg)
    rng = np.random.default_rng(3)
    theta, version, entries = np.zeros(N), 1, {}
    # (client, versions behind): repeats (per-client entries), stale ones, one beyond max_staleness later on,
    # and a fifth client that evicts the oldest from the window of four.
    plan = [("a", 0), ("b", 0), ("a", 0), ("c", 1), ("d", 2), ("b", 0), ("e", 0), ("c", 0), ("a", 3)]
    for client, behind in plan:
        delta = (rng.standard_normal(N) * 0.01).astype(np.float32)
        base = version - behind
        entries.pop(client, None)
        entries[client] = (delta, base)
        while len(entries) > 4:
            entries.pop(next(iter(entries)))
        expected = theta + 0.5 * _reference_window_step(
            entries, version, method, exponent=0.5, max_staleness=3, trim=0.25
        )
        a.submit(_Push(client, delta, base=base, upload=f"{client}{version}"))
        version += 1
        theta = expected
        np.testing.assert_allclose(_model(a), expected, rtol=1e-4, atol=1e-6)


def test_a_stale_delta_alone_in_the_robust_window_is_shrunk_like_the_mean_path():
    a = _aggregator(
        mode="async",
        buffer_size=1,
        robust="median",
        global_lr=0.5,
        staleness_exponent=0.5,
        norm_bound_multiple=0,
        version=9,
    )
    delta = _honest(1)

    a.submit(_Push("late", delta, base=1))  # 8 versions behind

    np.testing.assert_allclose(_model(a), 0.5 * delta / 3, rtol=1e-5)  # 0.5 × (1 + 8)^-0.5, not 0.5


@pytest.mark.parametrize("late_policy", ["accept", "stale"])
def test_sync_robust_round_follows_late_policy(late_policy):
    a = _aggregator(
        mode="sync",
        robust="trimmed_mean",
        trim_fraction=0.25,
        late_policy=late_policy,
        global_lr=1.0,
        staleness_exponent=1.0,
        norm_bound_multiple=0,
        version=5,
    )
    deltas = {c: _honest(i) for i, c in enumerate("abcd")}
    bases = {"a": 5, "b": 5, "c": 4, "d": 3}  # c and d are late

    for c in "abcd":
        a.submit(_Push(c, deltas[c], base=bases[c]))

    entries = {c: (deltas[c], bases[c]) for c in "abcd"}
    expected = _reference_window_step(
        entries, 5, "trimmed_mean", exponent=1.0, max_staleness=8, trim=0.25, accept_late=late_policy == "accept"
    )
    assert a.model.version == 6
    np.testing.assert_allclose(_model(a), expected, rtol=1e-5, atol=1e-7)


# ---- a site's share of a round -------------------------------------------------------------------


def _guard_push(client: str, norm: float):
    from types import SimpleNamespace

    return SimpleNamespace(client_id=client, norm=norm, numel=N, header=SimpleNamespace(local_steps=50))


def _land(guard, client: str, norm: float, base: int) -> None:
    """What the aggregator does with a push: admit, bound, accept, close the (K = 1) round."""
    from types import SimpleNamespace

    guard.admit(client, base)
    bounded = guard.bound(_guard_push(client, norm), SimpleNamespace(version=base, flat=np.zeros(N, np.float32)))
    guard.accepted(client, base, bounded.norm, 50)
    guard.round_closed(applied=True)


def test_a_site_lands_deltas_adding_up_to_its_bound_per_round_and_waits_for_the_active_other_sites():
    from ps_server.aggregation.guard import DeltaGuard

    now = [0.0]
    fed = FederationConfig(training=TrainingConfig(lr=1e-3, batch_size=16, local_steps=50))
    guard = DeltaGuard(fed, lambda c: c.split(".", 1)[0], clock=lambda: now[0])  # AdamW ceiling 1.1 here
    _land(guard, "a.t", 0.1, 1)  # two sites of norm 0.1: the bound of each is 2 × the other's median (0.2)
    _land(guard, "b.t", 0.1, 2)
    _land(guard, "b.t", 0.1, 3)  # b pushes again before a: its bound, and the 2 deltas a round holds, landed
    with pytest.raises(RoundShareSpent) as refused:
        _land(guard, "b.t", 0.05, 4)
    assert refused.value.reason == "round_share" and "round share" in refused.value.message
    _land(guard, "a.t", 0.1, 4)  # the other site pushed: b's round starts again
    _land(guard, "b.t", 3.0, 5)  # scaled to its bound, 0.2: the whole share
    with pytest.raises(RoundShareSpent):
        _land(guard, "b.s", 0.01, 6)  # another id of b shares its round
    now[0] += guard.active_for_s + 1  # a has been silent longer than the client timeout: gone
    _land(guard, "b.t", 3.0, 6)
    _land(guard, "b.t", 3.0, 7)
    _land(guard, "b.t", 3.0, 8)  # a site alone is held by nobody's round


def test_a_site_no_longer_present_holds_no_other_sites_round():
    """The last site of a run is not left waiting for a version the others, gone, will never make: a site
    counts for the round share only while it is present (on a PS: a client of it called within the last
    heartbeats), and again once it is back."""
    from ps_server.aggregation.guard import DeltaGuard

    present = {"a": True, "b": True}
    fed = FederationConfig(training=TrainingConfig(lr=1e-3, batch_size=16, local_steps=50))
    guard = DeltaGuard(fed, lambda c: c.split(".", 1)[0], clock=lambda: 0.0, present=lambda s: present[s])
    _land(guard, "a.t", 0.1, 1)
    for base in (2, 3):
        _land(guard, "b.t", 0.1, base)
    with pytest.raises(RoundShareSpent):  # a is present and has not pushed since: b's round is full
        _land(guard, "b.t", 0.05, 4)
    present["a"] = False  # a's clients finished (or lost their link): nobody holds b's round
    for base in (4, 5, 6, 7):
        _land(guard, "b.t", 0.1, base)
    present["a"] = True  # a is back, still without a delta since b's last ones: b's round is full again
    with pytest.raises(RoundShareSpent):
        _land(guard, "b.t", 0.05, 8)


def test_in_sync_mode_a_site_that_pushes_last_in_one_round_and_first_in_the_next_is_not_held():
    # Sync rounds are explicit (the site quota allows one delta per site per round): the round share, an async
    # rule, must not count a site's delta of the previous round against its first push of this one, or a
    # round of all sites waits for a site it refused.
    from types import SimpleNamespace

    from ps_server.aggregation.guard import DeltaGuard

    fed = FederationConfig(training=TrainingConfig(lr=1e-3, batch_size=16, local_steps=50))
    guard = DeltaGuard(fed, lambda c: c.split(".", 1)[0], clock=lambda: 0.0)

    def land(client: str, norm: float, base: int, mode: str) -> float:
        guard.admit(client, base)
        bounded = guard.bound(_guard_push(client, norm), SimpleNamespace(version=base, flat=np.zeros(N, np.float32)),
                              mode)  # fmt: skip
        guard.accepted(client, base, bounded.norm, 50)
        return bounded.norm

    for r in range(1, 4):  # both sites' histories, each at about 0.1
        land("a.t", 0.1, r, "sync")
        land("b.t", 0.1, r, "sync")
        guard.round_closed(applied=True)
    land("a.t", 0.1, 4, "sync")
    landed = land("b.t", 5.0, 4, "sync")  # b pushes last, at its bound
    guard.round_closed(applied=True)
    assert landed == pytest.approx(0.2, rel=0.05)  # scaled to 2 × a's median (the default multiple)
    assert land("b.t", 5.0, 5, "sync") == pytest.approx(landed, rel=0.05)  # first in the next round: not held
    guard.round_closed(applied=True)
    land("a.t", 0.1, 6, "async")  # the same pattern in async mode (every push a version) is the burst the rule
    guard.round_closed(applied=True)  # is for
    land("b.t", 5.0, 7, "async")
    guard.round_closed(applied=True)
    with pytest.raises(RoundShareSpent):
        land("b.t", 5.0, 8, "async")


def test_a_site_held_by_its_displacement_budget_does_not_shrink_the_other_sites_bounds():
    # Two sites: the hostile one drifts at 0.95 × its bound in one direction, so its displacement budget
    # shrinks its deltas towards zero. Its norm history keeps their length within the norm bound, so the honest
    # site's bound (2 × the other site's median) does not shrink with them: every honest delta lands whole.
    a = _aggregator(mode="async", buffer_size=1, outer_optimizer="fedavg", global_lr=0.5)
    direction = np.random.default_rng(99).standard_normal(N)
    direction /= np.linalg.norm(direction)
    base, drift_scales = 1, []
    for r in range(40):
        honest = _honest(1000 + r)
        before = _model(a)
        a.submit(_Sketched("clinic.t", honest, tokens=16 * 128 * 50, base=base, steps=50))
        base = a.model.version
        np.testing.assert_allclose(_model(a) - before, 0.5 * honest, rtol=1e-4, atol=1e-7, err_msg=f"round {r}")
        evil = (0.95 * 2 * float(np.linalg.norm(honest)) * direction).astype(np.float32)
        before = _model(a)
        a.submit(_Sketched("evil.t", evil, tokens=16 * 128 * 50, base=base, steps=50))
        base = a.model.version
        drift_scales.append(float((_model(a) - before) @ direction) / (0.5 * float(np.linalg.norm(evil))))
    assert min(drift_scales) < 0.1  # the drift was held by its budget


FULL = 16 * 128 * 50  # tokens of one full sync in _aggregator's pinned settings


def _correlated(seed: int, axis: np.ndarray, norm: float, cosine: float) -> np.ndarray:
    """A delta of length `norm` at cosine about `cosine` with every other one drawn around `axis`."""
    noise = np.random.default_rng(seed).standard_normal(N)
    v = np.sqrt(cosine) * axis + np.sqrt(1 - cosine) * noise / np.linalg.norm(noise)
    return (norm * v / np.linalg.norm(v)).astype(np.float32)


def _round_share_arena():
    a = _aggregator(mode="async", buffer_size=1, outer_optimizer="fedavg", global_lr=0.5)
    a.submit(_Sketched("a.t", _honest(1, rms=0.0025), tokens=FULL, base=1, steps=50))  # b's reference: ‖a‖
    return a, float(np.linalg.norm(_honest(1, rms=0.0025).astype(np.float64)))


def test_a_sites_deltas_in_one_round_whose_lengths_add_beyond_its_bound_land_while_their_sum_is_within_it():
    # Two deltas of 1.1 × the reference at cosine 0.5: their lengths add up to 2.2 × (beyond the default bound,
    # 2 ×), their sum's length is 1.1 × √3 = 1.91 ×. The third is refused by count, whatever it adds.
    a, reference = _round_share_arena()
    axis = np.random.default_rng(5).standard_normal(N)
    axis /= np.linalg.norm(axis)
    landed = []
    for k in range(2):
        delta = _correlated(10 + k, axis, 1.1 * reference, 0.5)
        before = _model(a)
        a.submit(_Sketched("b.t", delta, tokens=FULL, base=a.model.version, steps=50))
        np.testing.assert_allclose(_model(a) - before, 0.5 * delta, rtol=1e-4, atol=1e-8)  # whole
        landed.append(delta.astype(np.float64))
    assert sum(np.linalg.norm(d) for d in landed) > 2 * reference > np.linalg.norm(np.sum(landed, axis=0))
    before = _model(a).tobytes()
    with pytest.raises(RoundShareSpent) as refused:
        a.submit(_Sketched("b.t", -0.1 * landed[0].astype(np.float32), tokens=FULL, base=a.model.version, steps=50))
    assert refused.value.reason == "round_share" and "2 deltas" in refused.value.message
    assert _model(a).tobytes() == before
    a.submit(_Sketched("a.t", _honest(2, rms=0.0025), tokens=FULL, base=a.model.version, steps=50))
    a.submit(_Sketched("b.t", _correlated(20, axis, reference, 0.5), tokens=FULL, base=a.model.version, steps=50))


def test_deltas_of_one_round_in_one_direction_stop_at_the_bound():
    a, reference = _round_share_arena()
    axis = np.random.default_rng(6).standard_normal(N)
    axis = (1.6 * reference * axis / np.linalg.norm(axis)).astype(np.float32)
    a.submit(_Sketched("b.t", axis, tokens=FULL, base=a.model.version, steps=50))
    before = _model(a).tobytes()
    with pytest.raises(RoundShareSpent) as refused:  # 3.2 × the reference along one direction
        a.submit(_Sketched("b.t", axis, tokens=FULL, base=a.model.version, steps=50))
    assert "adding up to its bound" in refused.value.message
    assert _model(a).tobytes() == before
    a.submit(_Sketched("b.t", -axis, tokens=FULL, base=a.model.version, steps=50))  # its sum is 0: within
