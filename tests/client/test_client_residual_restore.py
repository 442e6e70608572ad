"""A rejoining client restores its error-feedback residual in a thread (`sync.whole.restore_residual`): same state, same
refusals as `ErrorFeedback.load_state_dict` in the main thread."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from client_agent.sync.whole import restore_residual as _restore_residual
from client_agent.sync.whole import restored_residual as _restored_residual
from client_agent.threads import in_thread as _in_thread
from geofed.codec import CodecError


def _saved(numel: int, staged: bool) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(1)
    state = {"residual": torch.from_numpy(rng.normal(0, 1e-3, numel).astype(np.float32))}
    if staged:
        state["staged"] = torch.from_numpy(rng.normal(0, 1e-3, numel).astype(np.float32))
    return state


@pytest.mark.parametrize("staged", [False, True])
def test_the_residual_restored_in_a_thread_is_the_saved_one(staged):
    saved = _saved(1000, staged)

    ef = _restored_residual(_in_thread(lambda: _restore_residual(saved, 0.5, "t.c0")), 1000)

    assert ef.decay == 0.5
    assert np.array_equal(ef.residual, saved["residual"].numpy())
    assert (ef.staged is not None) == staged
    if staged:
        assert np.array_equal(ef.staged, saved["staged"].numpy())
    assert not np.shares_memory(ef.residual, saved["residual"].numpy())  # a copy: the mmap goes away


def test_a_residual_of_another_size_than_the_model_is_refused():
    restoring = _in_thread(lambda: _restore_residual(_saved(1000, False), 1.0, "t.c0"))

    with pytest.raises(CodecError, match=r"shape \(1001,\)"):
        _restored_residual(restoring, 1001)


def test_a_damaged_residual_raises_in_the_main_thread():
    bad = _saved(100, False)
    bad["residual"][3] = float("nan")

    with pytest.raises(CodecError, match="non-finite"):
        _restored_residual(_in_thread(lambda: _restore_residual(bad, 1.0, "t.c0")), 100)
