"""The site defences on a sharded PS are the single PS's: the same pushes, bounded by the same rules, publish
the same model. The reference is the in-process engine (`Single`), fed the same deltas through `PushReceiver`.
"""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import FederationConfig
from geofed_testing.events import EventLog
from ps_server.aggregation.events import DeltaBounded
from ps_server.errors import AlreadySent

from .test_shards_unit import NUMEL, Front, Single

FED = FederationConfig.model_validate(
    {"aggregation": {"mode": "async", "buffer_size": 1, "outer_optimizer": "fedavg", "global_lr": 0.5}}
)


def both(tmp_path, shards: int = 2):
    front, single = Front(tmp_path, FED, shards), Single(FED)
    logs = {"front": EventLog(), "single": EventLog()}
    front.agg.observers.append(logs["front"])
    single.agg.observers.append(logs["single"])
    return front, single, logs


def test_a_drift_in_one_direction_is_bounded_by_the_displacement_budget_as_on_one_ps(tmp_path):
    """A site pushing 0.95 × its norm bound along one direction, round after round: the sharded front scales
    its deltas by the same budget as the single PS (the sketch summed from the shards' slices)."""
    rng = np.random.default_rng(7)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    direction = rng.standard_normal(NUMEL)
    direction /= np.linalg.norm(direction)
    front, single, logs = both(tmp_path)
    for target in (front, single):
        target.push("m", theta0, base=0, init=True)
    honest_norms: list[float] = []
    version = 1
    for r in range(24):
        honest = (rng.standard_normal(NUMEL) * 1e-3).astype(np.float32)
        honest_norms.append(float(np.linalg.norm(honest.astype(np.float64))))
        evil = (0.95 * 2 * float(np.median(honest_norms[-5:])) * direction).astype(np.float32)
        for target in (front, single):
            assert target.push("honest", honest, base=version, codec="fp32").status == "APPLIED"
            assert target.push("evil", evil, base=version + 1, codec="fp32").status == "APPLIED"
        version += 2
        np.testing.assert_allclose(front.model(), single.model.current().flat, rtol=0, atol=1e-6, err_msg=f"round {r}")
    rules = {name: [e.rule for e in log.of(DeltaBounded)] for name, log in logs.items()}
    assert rules["single"].count("displacement_budget") > 0
    assert rules["front"] == rules["single"]


def test_a_huge_delta_is_scaled_to_the_norm_bound_and_a_second_one_per_round_refused_as_on_one_ps(tmp_path):
    rng = np.random.default_rng(8)
    theta0 = rng.standard_normal(NUMEL).astype(np.float32)
    fed = FED.model_copy(update={"aggregation": FED.aggregation.model_copy(update={"buffer_size": 3})})
    front, single = Front(tmp_path, fed, 2), Single(fed)
    first, closer = [(rng.standard_normal(NUMEL) * 1e-3).astype(np.float32) for _ in range(2)]
    huge = (rng.standard_normal(NUMEL) * 1e6).astype(np.float32)
    for target in (front, single):
        target.push("m", theta0, base=0, init=True)
        target.push("a", first, base=1, codec="fp32")
    outcomes = [target.push("b", huge, base=1, codec="fp32") for target in (front, single)]
    assert outcomes[0].weight == pytest.approx(outcomes[1].weight)
    for target in (front, single):
        with pytest.raises(AlreadySent, match="already has a delta"):
            target.push("b", huge, base=1, codec="fp32", upload="again")
    assert [t.push("c", closer, base=1, codec="fp32").status for t in (front, single)] == ["APPLIED"] * 2
    np.testing.assert_allclose(front.model(), single.model.current().flat, rtol=0, atol=1e-6)
    moved = np.linalg.norm(front.model().astype(np.float64) - theta0)
    assert moved < 1.0  # the 1e6-per-element delta landed bounded
