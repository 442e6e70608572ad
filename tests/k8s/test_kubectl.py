"""The real `kubectl get` against the emulator: printer columns as a user sees them (server-side tables)."""

from __future__ import annotations

import pytest

from .conftest import NAMESPACE, NEEDS_KUBECTL, kubectl
from .emulator import GeofedEmulator
from .objects import create, patch
from .test_operator_federation import FED

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.kmock(cls=GeofedEmulator),
    NEEDS_KUBECTL,
]


async def test_kubectl_get_shows_the_printer_columns(api) -> None:
    """`kubectl get federations` prints PHASE, READY, REASON, VERSION, CLIENTS, GROUPS, LOSS, AGE from status."""
    await create(api, FED)
    ready = {"type": "Ready", "status": "True", "reason": "Serving", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    status = {"phase": "Running", "version": 11, "connectedClients": 2, "trainLoss": 3.25, "conditions": [ready],
              "groupVersions": "eu-west=12,us-east=11"}  # fmt: skip
    await patch(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo", {"status": status}, status=True)
    out = await kubectl("get", "federations", "-n", NAMESPACE)
    header, row = out.splitlines()
    assert header.split() == ["NAME", "PHASE", "READY", "REASON", "VERSION", "CLIENTS", "GROUPS", "LOSS", "AGE"]
    assert row.split()[:8] == ["demo", "Running", "True", "Serving", "11", "2", "eu-west=12,us-east=11", "3.25"]
    wide = await kubectl("get", "fed", "demo", "-n", NAMESPACE, "-o", "wide")
    assert "ADDRESS" in wide.splitlines()[0] and "MODE" in wide.splitlines()[0]
