"""Total PS loss: an empty PS is re-seeded from the master agent's checkpoint (issue 5, item 1)."""

from __future__ import annotations

import pytest

from geofed_testing.reliability.reseed import total_ps_loss_reseed


@pytest.mark.long
def test_total_ps_loss_is_reseeded_from_the_master_checkpoint(tmp_path, reaper):
    result = total_ps_loss_reseed(tmp_path, reaper)

    assert result.details["reseeded_version"] == result.details["master_checkpoint_base"]
    print(f"{result.name}: {result.outcome}; model back {result.resume_s} s after the new PS listened")
