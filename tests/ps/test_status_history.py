"""The status page's loss series: per-version means of the clients' latest reported losses."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ps_server.status_page.history import LossHistory


def _clients(**reports):
    return {cid: SimpleNamespace(report=r) for cid, r in reports.items()}


def test_a_report_without_a_loss_keeps_the_clients_previous_one():
    h = LossHistory()

    h.record(2, _clients(a={"train_loss": 4.0, "eval_loss": 4.5}, b={}))
    h.record(3, _clients(a={"train_loss": 3.0, "eval_loss": 0.0}, b={"train_loss": 2.0, "eval_loss": 3.5}))

    (v2, _, train2, eval2), (v3, _, train3, eval3) = h.since(0)
    assert (v2, train2, eval2) == (2, 4.0, 4.5)
    assert (v3, train3, eval3) == (3, pytest.approx(2.5), pytest.approx(4.0))  # a's eval 4.5 kept
    assert [p[0] for p in h.since(2)] == [3]


def test_no_losses_yet_is_none_and_a_long_run_is_thinned_not_cut():
    h = LossHistory(max_points=10)

    for v in range(1, 26):
        h.record(v, _clients(a={}))

    versions = [p[0] for p in h.since(0)]
    assert all(p[2] is None and p[3] is None for p in h.since(0))
    assert len(versions) <= 10 and versions[0] == 1 and versions[-1] == 25 and versions == sorted(versions)
