"""Every watch of the operator is filtered by the API server, not in the operator.

The emulator records each request's query (`labelSelector` included) and filters lists and watches
by it as a real API server does; a real one also serves such lists from its watch cache.
"""

from __future__ import annotations

import pytest

from geofed_operator import names

from .conftest import operator_running, watches_open
from .emulator import GeofedEmulator
from .test_operator_siteclient import _runner

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]


async def test_the_site_operator_lists_and_watches_only_client_pods(api, fake_ps) -> None:
    async with operator_running(_runner(fake_ps)) as runner:
        await watches_open(api, {"siteclients", "pods"})
    assert runner.exception is None
    # No SiteClient exists: every pod read is kopf's list or watch.
    pod_reads = [r for r in list(api) if r.resource is not None and r.resource.plural == "pods" and r.method == "GET"]
    assert pod_reads, "the site operator neither listed nor watched pods"
    assert {r.params.get("watch") for r in pod_reads} == {None, "true"}  # the initial list, then the watch
    assert {r.params.get("labelSelector") for r in pod_reads} == {names.LABEL_SITECLIENT}
