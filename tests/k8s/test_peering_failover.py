"""Operator failover: with kopf peering the standby replica takes over when the serving one stops.

kopf peering is priority-based, not a lease: the highest-priority live replica serves, the others
pause; a replica that exits cleanly drops out of the peering record at once (one that dies is dropped
after the peering lifetime, a minute by default), and the next one resumes where the status left off.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from .conftest import NAMESPACE, FakePS, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, get, patch
from .test_operator_siteclient import CREDENTIAL, SITECLIENT, _status
from .test_peering import _replica, both_peered


@pytest.mark.asyncio
@pytest.mark.kmock(cls=GeofedEmulator)
async def test_the_standby_replica_takes_over_when_the_serving_one_stops(api) -> None:
    """Replica 200 launches attempt 1; it stops; replica 100 relaunches the evicted client as attempt 2."""
    peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "geofed"}}
    async with api.post("/apis/kopf.dev/v1/clusterkopfpeerings", json=peering) as resp:
        assert resp.status < 300, await resp.text()
    serving, standby = FakePS(), FakePS()
    async with contextlib.AsyncExitStack() as stack:
        second = await stack.enter_async_context(operator_running(_replica(standby, 100)))
        async with operator_running(_replica(serving, 200)) as first:
            await watches_open(api, {"siteclients"})
            await both_peered(api)
            await create(api, CREDENTIAL)
            await create(api, SITECLIENT)
            job = await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-1"), what="Job 1")
            await wait_for(lambda: _status(api).get("attempt") == 1, what="attempt 1 in status")
            await asyncio.sleep(1.0)  # ticks of both replicas: the standby stays paused
            assert len(serving.tokens) == 1 and standby.tokens == []
        assert first.exception is None

        pod = {"apiVersion": "v1", "kind": "Pod", "spec": job["spec"]["template"]["spec"],
               "metadata": {"name": "gpu0-1-abcde", "namespace": NAMESPACE,
                            "labels": job["spec"]["template"]["metadata"]["labels"]}}  # fmt: skip
        await create(api, pod)
        evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}
        await patch(api, "v1", "Pod", NAMESPACE, "gpu0-1-abcde", {"status": evicted}, status=True)
        await wait_for(lambda: get(api, "batch/v1/jobs", NAMESPACE, "gpu0-2"), timeout=90, what="Job 2 by the standby")
        assert len(standby.tokens) == 1 and len(serving.tokens) == 1
        await wait_for(lambda: _status(api).get("attempt") == 2, what="attempt 2 in status")
        assert _status(api)["restarts"] == 1 and _status(api)["lastFailureReason"] == "Evicted"
    assert second.exception is None
