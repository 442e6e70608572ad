"""A watch stream ends when its handler is cancelled, as a kube-apiserver's does when it shuts down.

A server that shuts down (or a test loop that closes) cancels the handlers of the streams still open; one that
went on streaming would keep the loop waiting for the watch's whole `timeoutSeconds`.
"""

from __future__ import annotations

import asyncio

import pytest

from .emulator import GeofedEmulator
from .objects import create

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator)]
NS = "watching"


def _awaits(task: asyncio.Task) -> list[str]:
    """The names of the coroutines a task is suspended in, outermost first."""
    names, coro = [], task.get_coro()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_name)
        coro = coro.cr_await
    return names


def _watch_handlers() -> list[asyncio.Task]:
    """The server tasks running a watch (suspended inside the emulator's `_verb_watch`)."""
    return [t for t in asyncio.all_tasks() if "_verb_watch" in _awaits(t)]


async def test_a_watch_cancelled_while_changes_arrive_ends_at_once(api: GeofedEmulator) -> None:
    api.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    lingering = 0
    for i in range(12):  # a change and the cancellation in the same loop pass, at several offsets
        async with api.get(f"/api/v1/namespaces/{NS}/configmaps", params={"watch": "true",
                                                                           "resourceVersion": "0"}) as resp:
            assert resp.status == 200
            for _ in range(50):
                if handlers := _watch_handlers():
                    break
                await asyncio.sleep(0.01)
            assert len(handlers) == 1, handlers
            await create(api, {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": f"cm{i}", "namespace": NS}, "data": {}})
            for _ in range(i % 4):
                await asyncio.sleep(0)
            handlers[0].cancel()
            done, _ = await asyncio.wait(handlers, timeout=3.0)
            lingering += not done
            if not done:  # the client hangs up, so the test goes on to count the others
                resp.close()
                await asyncio.wait(handlers, timeout=3.0)
    assert lingering == 0, f"{lingering} of 12 watch handlers went on streaming after they were cancelled"
