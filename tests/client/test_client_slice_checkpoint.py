"""Sharded checkpoints in one process (issue 18): re-saves of a step, and the bad-input cases.

Resharding across rank counts is tested with gloo ranks in `test_client_slices.py`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from client_agent.training.checkpoint import CheckpointError
from client_agent.training.slices.checkpoint import POINTER, load_sharded, save_sharded
from client_agent.training.slices.partition import FlatPartition
from geofed.codec import ErrorFeedback

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def make(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, FlatPartition, ErrorFeedback]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(7, 5), nn.Linear(5, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 7)).sum().backward()
    optimizer.step()
    numel = sum(p.numel() for p in model.parameters())
    ef = ErrorFeedback(numel)
    ef.residual[:] = np.arange(numel, dtype=np.float32) * seed
    return model, optimizer, FlatPartition(numel, 1, 16), ef


def test_saving_the_same_step_again_never_writes_over_the_checkpoint_in_force(tmp_path):
    model, optimizer, part, ef = make(1)
    save_sharded(tmp_path, 3, model, optimizer, part, ef, {"step": 3})
    first = json.loads((tmp_path / POINTER).read_text())["dir"]
    model2, optimizer2, _, ef2 = make(2)
    save_sharded(tmp_path, 3, model2, optimizer2, part, ef2, {"step": 3, "again": True})

    fresh, fresh_opt, _, fresh_ef = make(5)
    meta = load_sharded(tmp_path, fresh, fresh_opt, part, fresh_ef)

    # The second save went to its own directory and replaced the first only once complete.
    assert json.loads((tmp_path / POINTER).read_text())["dir"] != first and not (tmp_path / first).exists()
    assert meta == {"step": 3, "again": True}
    np.testing.assert_array_equal(fresh_ef.residual, ef2.residual)
    for a, b in zip(fresh.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_no_checkpoint_is_none(tmp_path):
    model, optimizer, part, ef = make(1)
    assert load_sharded(tmp_path, model, optimizer, part, ef) is None


@pytest.mark.parametrize(("pointer", "message"), [
    ("{not json", "not a readable sharded-checkpoint pointer"),
    ('{"format": "other"}', "is not geofed-sharded-1"),
    ('{"format": "geofed-sharded-1", "dir": "../x", "serial": 0}', "malformed pointer"),
    ('{"format": "geofed-sharded-1", "dir": "step-1-0", "serial": 0, "numel": 58, "residual": [], "meta": {}}',
     "which is not there"),
])
def test_a_bad_pointer_is_refused_clearly(tmp_path, pointer, message):
    model, optimizer, part, ef = make(1)
    (tmp_path / POINTER).write_text(pointer)
    with pytest.raises(CheckpointError, match=message):
        load_sharded(tmp_path, model, optimizer, part, ef)


def test_a_checkpoint_of_another_model_size_is_refused_and_loads_nothing(tmp_path):
    model, optimizer, part, ef = make(1)
    save_sharded(tmp_path, 1, model, optimizer, part, ef, {})
    other, other_opt, _, other_ef = make(2)
    before = [p.detach().clone() for p in other.parameters()]
    with pytest.raises(CheckpointError, match="has 58 elements, this model's 59"):
        load_sharded(tmp_path, other, other_opt, FlatPartition(59, 1, 16), other_ef)
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))
