"""A paradigm's own held-out metrics (DPO's preference accuracy and reward margin) from the client's report to
the status page: over the wire, kept between evaluations, and bounded in what the PS keeps of a client's."""

from __future__ import annotations

import json
import math
import urllib.request

import numpy as np

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.messages import MAX_PARADIGM_METRICS, report_from_proto, report_to_proto
from geofed_testing.procs import PSNode, free_port
from geofed_testing.wire import NUMEL, init_model, join, push


def test_metrics_cross_the_wire_as_sent():
    sent = {"train_loss": 2.5, "paradigm_metrics": {"preference_accuracy": 61.25, "reward_margin": -0.125}}

    wire = pb.ClientReport.FromString(report_to_proto(sent).SerializeToString())

    assert report_from_proto(wire)["paradigm_metrics"] == {"preference_accuracy": 61.25, "reward_margin": -0.125}
    assert report_from_proto(report_to_proto({"train_loss": 2.5}))["paradigm_metrics"] == {}


def test_the_ps_keeps_only_plainly_named_finite_metrics_and_at_most_a_few():
    msg = pb.ClientReport()
    good = {f"m{i:02d}": float(i) for i in range(MAX_PARADIGM_METRICS + 4)}
    msg.paradigm_metrics.update({**good, "has space": 1.0, "<script>": 2.0, "x" * 65: 3.0,
                                 "nan_value": math.nan, "inf_value": math.inf})

    kept = report_from_proto(msg)["paradigm_metrics"]

    assert kept == {k: good[k] for k in sorted(good)[:MAX_PARADIGM_METRICS]}


def _status(ps: PSNode) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ps.status_port}/api/status", timeout=20) as r:
        return json.loads(r.read())


def _metrics_of(ps: PSNode, client_id: str) -> dict:
    (row,) = [c for c in _status(ps)["clients"] if c["client_id"] == client_id]
    return row["paradigm_metrics"]


def test_the_status_page_shows_the_last_metrics_a_client_reported(tmp_path):
    # Prepare: a real PS with its page on loopback, one site's client pushing over gRPC
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1}})
    ps.status_port = free_port()
    ps.start()
    client = None
    try:
        client = join(ps, "east.gpu-0", site="east", master=True)
        init_model(client)
        delta = (np.random.default_rng(0).standard_normal(NUMEL) * 0.001).astype(np.float32)

        # Execute: a push whose report carries an evaluation's metrics, then one without (no evaluation that round)
        client.report = {"train_loss": 3.0, "eval_loss": 3.1,
                         "paradigm_metrics": {"preference_accuracy": 57.5, "reward_margin": 0.25}}
        assert push(client, 1, delta, tokens=100).status == "APPLIED"
        after_eval = _metrics_of(ps, "east.gpu-0")
        client.report = {"train_loss": 2.9}
        assert push(client, 2, delta, tokens=100).status == "APPLIED"
        between_evals = _metrics_of(ps, "east.gpu-0")

        # Assert
        assert after_eval == {"preference_accuracy": 57.5, "reward_margin": 0.25}
        assert between_evals == after_eval
    finally:
        if client is not None:
            client.close()
        ps.kill()
