"""Does a watch loop that waits with `asyncio.wait_for(condition.wait(), 1.0)` outlive its cancellation?

300 trials per variant: a watcher waits on a Condition, a change notifies it, and the watcher task is cancelled
0-4 loop passes later; a watcher still running 50 ms after the cancel swallowed it. "old" is the API
emulator's watch before the fix (wait_for), "new" after it (asyncio.timeout).

    .venv/bin/python bench/results/flakes/wait_for_cancellation.py
"""

from __future__ import annotations

import asyncio
import contextlib


async def watcher(cond: asyncio.Condition, new: bool) -> None:
    while True:
        if new:
            try:
                async with cond, asyncio.timeout(1.0):
                    await cond.wait()
            except TimeoutError:
                pass
        else:
            async with cond:
                try:
                    await asyncio.wait_for(cond.wait(), timeout=1.0)
                except TimeoutError:
                    pass


async def wake(cond: asyncio.Condition) -> None:
    async with cond:
        cond.notify_all()


async def main(new: bool, trials: int = 300) -> None:
    swallowed = 0
    for trial in range(trials):
        cond = asyncio.Condition()
        task = asyncio.create_task(watcher(cond, new))
        await asyncio.sleep(0)
        asyncio.create_task(wake(cond))
        for _ in range(trial % 5):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=0.05)
        if not done:
            swallowed += 1
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    print("new" if new else "old", "cancellations swallowed:", swallowed, f"/ {trials}")


if __name__ == "__main__":
    asyncio.run(main(False))
    asyncio.run(main(True))
