"""Status reducers and conditions (pure): PS status -> Federation status, readiness, transitions."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from geofed_operator.conditions import get_condition, rfc3339, set_condition
from geofed_operator.federation_status import (
    deployment_ready,
    federation_status_degraded,
    federation_status_from_ps,
    federation_status_not_ready,
)

T0 = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=5)
PS = {
    "version": 12, "connected_clients": 3, "known_clients": 4, "mode": "async", "buffered_deltas": 1,
    "last_train_loss": 2.5, "last_eval_loss": 0.0, "has_model": True, "num_parameters": 124_000_000,
    "federation": "demo", "server_instance": "abc",
}  # fmt: skip


def test_condition_keeps_its_transition_time_while_unchanged() -> None:
    conds = set_condition([], "Ready", True, "Serving", "ok", now=T0, generation=1)
    conds = set_condition(conds, "Ready", True, "Serving", "still ok", now=T1, generation=2)
    ready = get_condition(conds, "Ready")
    assert ready["lastTransitionTime"] == rfc3339(T0) and ready["message"] == "still ok"
    conds = set_condition(conds, "Ready", False, "PSUnreachable", "down", now=T1, generation=2)
    assert get_condition(conds, "Ready")["lastTransitionTime"] == rfc3339(T1)
    conds = set_condition(conds, "Degraded", True, "PSUnreachable", "down", now=T1, generation=2)
    assert [c["type"] for c in set_condition(conds, "Progressing", None, "X", "", now=T1, generation=2)] == [
        "Ready",
        "Progressing",
        "Degraded",
    ]


def test_status_from_a_serving_ps() -> None:
    st = federation_status_from_ps(PS, now=T0, generation=3, conditions=None)
    assert (st["phase"], st["version"], st["connectedClients"], st["trainLoss"], st["numParameters"]) == (
        "Running",
        12,
        3,
        2.5,
        124_000_000,
    )
    assert st["evalLoss"] is None  # 0.0 is the proto default: no evaluation reported yet
    assert {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]} == {
        "Ready": ("True", "Serving"),
        "Progressing": ("False", "RolledOut"),
        "Degraded": ("False", "Healthy"),
    }


def test_status_before_the_master_uploads_the_model() -> None:
    st = federation_status_from_ps({**PS, "has_model": False, "version": 0}, now=T0, generation=1, conditions=None)
    ready = get_condition(st["conditions"], "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForModel")  # kubectl wait must not pass yet


def test_degraded_and_not_ready() -> None:
    st = federation_status_degraded("PSUnreachable", "no route", now=T0, generation=1, conditions=None)
    assert st["phase"] == "Degraded" and get_condition(st["conditions"], "Degraded")["message"] == "no route"
    st = federation_status_not_ready("waiting", now=T0, generation=1, conditions=st["conditions"])
    assert st["phase"] == "Progressing" and get_condition(st["conditions"], "Degraded")["status"] == "True"


@pytest.mark.parametrize(
    ("deployment", "ready"),
    [
        (None, False),
        ({"metadata": {"generation": 2}, "spec": {"replicas": 1},
          "status": {"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}}, False),
        ({"metadata": {"generation": 2}, "spec": {"replicas": 1},
          "status": {"observedGeneration": 2, "readyReplicas": 0, "updatedReplicas": 1}}, False),
        ({"metadata": {"generation": 2}, "spec": {"replicas": 1},
          "status": {"observedGeneration": 2, "readyReplicas": 1, "updatedReplicas": 1}}, True),
    ],
)  # fmt: skip
def test_deployment_ready(deployment: Any, ready: bool) -> None:
    ok, why = deployment_ready(deployment)
    assert ok is ready and (why == "") is ready
