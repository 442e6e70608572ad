"""Goodput from real pushes against a real PS: the share of the tokens clients reported training with the deltas
the PS received that are in a published version, in its status and its metrics."""

from __future__ import annotations

import numpy as np
import pytest

from client_agent.connection.ps_client import StaleDeltaError
from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, init_model, join, push


def _delta(seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(NUMEL) * 0.01).astype(np.float32)


def test_goodput_counts_the_tokens_of_stale_deltas_as_trained_and_not_applied(tmp_path):
    # Prepare: async, one delta per version, and no staleness allowed: a delta on an older version is refused
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1, "max_staleness": 0}},
                metrics=True).start()
    try:
        master = join(ps, "boot.master", master=True, start=False)
        init_model(master)
        a, b = join(ps, "site.a", start=False), join(ps, "site.b", start=False)

        # Execute: a lands 1000 tokens; b's 3000, trained on the same version, arrive one version late
        assert push(a, 1, _delta(1), tokens=1000).status == "APPLIED"
        with pytest.raises(StaleDeltaError):
            push(b, 1, _delta(2), tokens=3000)
        with ps.admin() as admin:
            after_stale = admin.status()
        assert push(b, 2, _delta(3), tokens=1000).status == "APPLIED"  # b retrains on the new version
        with ps.admin() as admin:
            final = admin.status()

        # Assert: 1000 of 4000 tokens, then 2000 of 5000; the metrics agree with the status
        assert (after_stale["goodput_tokens_applied"], after_stale["goodput_tokens_trained"]) == (1000, 4000)
        assert after_stale["goodput"] == pytest.approx(0.25)
        assert (final["goodput_tokens_applied"], final["goodput_tokens_trained"]) == (2000, 5000)
        assert final["goodput"] == pytest.approx(0.4)
        assert ps.metric("geofed_goodput") == pytest.approx(0.4)
        for c in (master, a, b):
            c.close()
    finally:
        ps.kill()


def test_goodput_counts_a_sync_rounds_deltas_once_it_is_published(tmp_path):
    # Prepare: sync; the round closes on two deltas of the three joined sites (the master, a and b)
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "sync", "quorum": 0.5}}).start()
    try:
        master = join(ps, "boot.master", master=True, start=False)
        init_model(master)
        a, b = join(ps, "site.a", start=False), join(ps, "site.b", start=False)

        # Execute: a's delta is accepted into the open round, then b's closes it
        assert push(a, 1, _delta(1), tokens=700).status == "ACCEPTED"
        with ps.admin() as admin:
            open_round = admin.status()
        assert push(b, 1, _delta(2), tokens=300).status == "APPLIED"
        with ps.admin() as admin:
            closed = admin.status()

        # Assert: a delta in an open round is trained, not yet applied; the published round applies both
        assert (open_round["goodput_tokens_applied"], open_round["goodput_tokens_trained"]) == (0, 700)
        assert (closed["goodput_tokens_applied"], closed["goodput_tokens_trained"]) == (1000, 1000)
        assert closed["goodput"] == pytest.approx(1.0)
        for c in (master, a, b):
            c.close()
    finally:
        ps.kill()
