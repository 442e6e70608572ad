"""A Federation never waits for the operator to be deleted (the real operator against the emulator).

The emulator keeps an object that carries a finalizer, with deletionTimestamp set, until the finalizer
is removed, as an API server does: a finalizer left on a Federation would make `kubectl delete` hang
once the operator is gone (after `helm uninstall`).
"""

from __future__ import annotations

import asyncio

import pytest

from .conftest import NAMESPACE, operator_running, wait_for, watches_open
from .emulator import GeofedEmulator
from .objects import create, delete, get
from .test_operator_federation import FED, _runner
from .test_operator_siteclient import CREDENTIAL, SITECLIENT

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
FED_KEY = "geofed.io/v1alpha1/federations"
FINALIZER = "geofed.io/cleanup"


def _finalizers(api: GeofedEmulator, key: str, name: str) -> list[str]:
    return ((get(api, key, NAMESPACE, name) or {}).get("metadata") or {}).get("finalizers") or []


def _deployment_writes(api: GeofedEmulator) -> int:
    return sum(1 for r in list(api) if r.resource is not None and r.resource.plural == "deployments"
               and r.method.name in ("POST", "PATCH"))  # fmt: skip


async def test_a_federation_has_no_finalizer_and_is_deleted_without_the_operator(api, fake_ps) -> None:
    """Reconciled and polled with no finalizer; deleted after the operator stopped: gone at once."""
    async with operator_running(_runner("both", fake_ps)) as runner:
        await watches_open(api, {"federations", "siteclients"})
        await create(api, FED)
        await create(api, CREDENTIAL)
        await create(api, SITECLIENT)
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="PS Deployment")
        await wait_for(lambda: FINALIZER in _finalizers(api, "geofed.io/v1alpha1/siteclients", "gpu0"),
                       what="the SiteClient's finalizer (its cleanup needs the operator)")  # fmt: skip
        await asyncio.sleep(1.0)  # several status passes
        assert _finalizers(api, FED_KEY, "demo") == []
    assert runner.exception is None

    await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")  # no operator runs now
    assert get(api, FED_KEY, NAMESPACE, "demo") is None, "the Federation must not hang in Terminating"
    assert get(api, "apps/v1/deployments", NAMESPACE, "demo-ps") is None  # its children go with it (GC)


async def test_a_deleted_federations_timer_stops(api, fake_ps) -> None:
    """Deleted while the operator runs: no pass re-creates its children afterwards."""
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await watches_open(api, {"federations"})
        await create(api, FED)
        await wait_for(lambda: get(api, "apps/v1/deployments", NAMESPACE, "demo-ps"), what="PS Deployment")
        await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
        await asyncio.sleep(0.5)  # a pass that overlapped the deletion has finished
        writes = _deployment_writes(api)
        await asyncio.sleep(1.5)  # five status intervals
        assert _deployment_writes(api) == writes and get(api, "apps/v1/deployments", NAMESPACE, "demo-ps") is None
    assert runner.exception is None


async def test_the_operator_removes_a_finalizer_left_on_a_federation(api, fake_ps) -> None:
    """A Federation that carries the finalizer (written by an older operator) loses it, so it can be deleted."""
    await create(api, {**FED, "metadata": {**FED["metadata"], "finalizers": [FINALIZER]}})
    async with operator_running(_runner("cloud", fake_ps)) as runner:
        await wait_for(lambda: _finalizers(api, FED_KEY, "demo") == [], what="the finalizer removed")
    assert runner.exception is None
    await delete(api, "geofed.io/v1alpha1", "Federation", NAMESPACE, "demo")
    assert get(api, FED_KEY, NAMESPACE, "demo") is None
