"""Centred clipping of deltas around the recent consensus (ps_server/aggregation/centred_clip.py), alone and
inside the delta-averaging strategy; expected values computed here from the formula c + clip_τ(δ − c)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from geofed.config import AggregationConfig, FederationConfig
from ps_server.aggregation.centred_clip import BETA, CentredClip
from ps_server.aggregation.rounds import Admission
from ps_server.aggregation.strategies.pretrain import Pretrain
from ps_server.aggregation.strategies.sparse_pretrain import SparsePretrain

N = 600


def pieces(a: np.ndarray, size: int = 256):
    return [(off, a[off : off + size]) for off in range(0, a.size, size)]


def vec(seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(N) * scale).astype(np.float32)


def test_the_deviation_is_the_distance_from_the_centre():
    clip = CentredClip(1.0, N)
    clip.centre[:] = vec(1)
    d = vec(2)
    expected = float(np.linalg.norm(d - vec(1)))
    assert clip.deviation(pieces(d), float(np.linalg.norm(d))) == pytest.approx(expected, rel=1e-5)


def test_nothing_is_clipped_until_three_deviations_are_known_then_beyond_the_median_multiple():
    clip = CentredClip(1.5, N)
    for seed, scale in ((1, 1.0), (2, 2.0), (3, 3.0)):
        d = vec(seed, scale)
        assert clip.factor(pieces(d), float(np.linalg.norm(d)))[0] == 1.0
    median = float(np.linalg.norm(vec(2, 2.0)))  # the centre is zero: deviations are the norms
    far = vec(4, 10.0)
    s, dev, tau = clip.factor(pieces(far), float(np.linalg.norm(far)))
    assert tau == pytest.approx(1.5 * median, rel=1e-5)
    assert s == pytest.approx(tau / float(np.linalg.norm(far)), rel=1e-5)
    assert clip.deviations[-1] == pytest.approx(tau, rel=1e-5)  # recorded after clipping: no ratchet


def test_a_delta_along_the_consensus_passes_and_one_against_it_is_held_to_the_radius():
    clip = CentredClip(1.0, N)
    c = vec(1)
    clip.centre[:] = c
    clip.deviations.extend([1.0, 1.0, 1.0])  # τ = 1
    along = c + 0.5 * vec(2) / np.linalg.norm(vec(2))  # 0.5 away from the centre
    assert clip.factor(pieces(along), float(np.linalg.norm(along)))[0] == 1.0
    flipped = -c
    s, dev, _ = clip.factor(pieces(flipped), float(np.linalg.norm(flipped)))
    assert dev == pytest.approx(2 * float(np.linalg.norm(c)), rel=1e-5)
    entered = s * flipped + (1 - s) * c
    assert float(np.linalg.norm(entered - c)) == pytest.approx(1.0, rel=1e-4)


def test_the_centre_is_a_moving_average_of_the_combined_deltas():
    clip = CentredClip(1.0, N)
    clip.update_(vec(1))
    clip.update_(vec(2))
    np.testing.assert_allclose(clip.centre, BETA * (1 - BETA) * vec(1) + (1 - BETA) * vec(2), rtol=1e-5, atol=1e-7)


class Push:
    """A dense delta as a strategy folds it."""

    def __init__(self, client: str, values: np.ndarray) -> None:
        self.client_id = self.site = client
        self.values, self.numel = values, values.size
        self.norm = float(np.linalg.norm(values.astype(np.float64)))

    def iter_values(self, max_numel: int):
        yield from pieces(self.values)


class Snap:
    def __init__(self, flat: np.ndarray) -> None:
        self.flat, self.version = flat, 1


def strategy(multiple: float, cls=Pretrain, **agg) -> Pretrain:
    settings = {"outer_optimizer": "fedavg", "global_lr": 1.0, "weighting": "uniform", "centred_clip": multiple, **agg}
    s = cls(FederationConfig(aggregation=settings))
    s.install(N, None)
    return s


def one_round(s: Pretrain, deltas: list[np.ndarray]) -> np.ndarray:
    """The new model from θ = 0 after one round of `deltas` (FedAvg, η 1: the round's mean)."""
    acc = s.open_round(Snap(np.zeros(N, dtype=np.float32)))
    for i, d in enumerate(deltas):
        s.fold(acc, Push(f"site{i}", d), Admission(0, 1.0), num_tokens=100, local_steps=1)
    return s.apply(Snap(np.zeros(N, dtype=np.float32)), s.close(acc))


def test_a_flipped_delta_enters_the_round_at_the_radius_around_the_consensus():
    s = strategy(1.0)
    common = vec(0)
    honest = [common + 0.3 * vec(10 + i) for i in range(3)]
    for _ in range(3):  # consensus builds up; deviations of honest deltas are recorded
        one_round(s, honest)
    c = s.centred.centre.copy()
    tau = s.centred.radius()
    flipped = -honest[0]
    mean = one_round(s, [flipped])
    dev = flipped - c
    expected = c + dev * min(1.0, tau / float(np.linalg.norm(dev)))
    np.testing.assert_allclose(mean, expected, rtol=1e-4, atol=1e-6)
    assert float(np.linalg.norm(mean - c)) == pytest.approx(tau, rel=1e-4)


def test_off_by_default_and_the_round_is_the_plain_mean():
    s = strategy(0.0)
    assert not s.centred.enabled and FederationConfig().aggregation.centred_clip == 0
    d = [vec(1), -vec(1) * 5]
    np.testing.assert_allclose(one_round(s, d), (d[0] + d[1]) / 2, rtol=1e-5, atol=1e-6)


def test_the_centre_and_deviations_survive_a_restart():
    s = strategy(1.0)
    for _ in range(3):
        one_round(s, [vec(1), vec(2)])
    again = strategy(1.0)
    again.load_state_dict(s.state_dict())
    np.testing.assert_array_equal(again.centred.centre, s.centred.centre)
    assert list(again.centred.deviations) == list(s.centred.deviations)


def test_not_with_sparse_folding_nor_with_a_robust_combination():
    assert SparsePretrain.centred_clipping is False and Pretrain.centred_clipping is True
    with pytest.raises(ValidationError, match="centred_clip 1.0 clips around the weighted mean's consensus"):
        AggregationConfig(centred_clip=1.0, robust="median")
