"""aggregation.mode 'auto' with real processes (issue 14, item 2): a fast and a 5x slowed client start sync; the
PS measures their round times, switches the federation to async between two rounds, logs it with its reason and
exports it; the clients follow (the fast one stops waiting for the slow one) and training goes on."""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.request
from pathlib import Path

from client_agent.data.corpus import stdlib_split, write_file_list
from geofed_apps.launch import start_client, stop, wait_until
from geofed_testing.procs import PSNode

FED = {
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64},
    # H steps bind (T is far away), so the slowed client's rounds take ~5x as long as the fast one's.
    "training": {"batch_size": 4, "local_steps": 8, "sync_interval_s": 600, "eval_every": 1000, "eval_batches": 1,
                 "torch_threads": 1},
    "aggregation": {"mode": "auto", "quorum": 1.0, "straggler_timeout_s": 120, "buffer_size": 1},
    "codec": {"name": "int8"},
    "autotune": {"async_above": 2.0, "sync_below": 1.5, "round_window": 2},
}
SWITCH = re.compile(r"event=autotune knob=aggregation_mode value=(\w+) running=(\w+) applied=true reason='(.*)'")


def _mode_gauge(ps: PSNode, mode: str) -> float:
    """geofed_aggregation_mode{mode="<mode>"} (PSNode.metric sums every label set)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ps.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.findall(rf'^geofed_aggregation_mode\{{mode="{mode}"\}}\s+(\S+)$', text, re.M)
    return float(found[0]) if found else -1.0


def _pushes(ps: PSNode) -> dict[str, int]:
    with ps.admin() as admin:
        return {c["client_id"]: int(c["pushes"]) for c in admin.list_clients()}


def _deferred(log: Path) -> int:
    """How many of a client's pushes its site's round share put off (the agent logs each one)."""
    return log.read_text(errors="replace").count("event=delta_deferred")


def test_auto_mode_switches_to_async_when_client_speeds_spread(tmp_path):
    # Prepare
    ps = PSNode(tmp_path / "ps", FED, metrics=True).start()
    split = stdlib_split(2)
    lists = [write_file_list(tmp_path / f"c{i}.list", files[:40]) for i, files in enumerate(split.clients)]
    procs: list[subprocess.Popen] = []
    try:
        with ps.admin() as admin:
            tokens = [admin.create_token(f"t.c{i}", master=(i == 0))[0] for i in range(2)]
        for i, slowdown in enumerate((1.0, 5.0)):
            procs.append(start_client(tokens[i], tmp_path / f"token-{i}", tmp_path / f"client-{i}.log",
                                      ps=ps.address, client_id=f"t.c{i}", data=lists[i],
                                      work_dir=tmp_path / f"work-{i}", seed=i, slowdown=slowdown))

        def dead() -> str | None:
            return next((f"client {i} exited" for i, p in enumerate(procs) if p.poll() is not None), None)

        # Execute: run until the PS switches to async
        wait_until(lambda: SWITCH.search(ps.logs()) is not None, 300, "the PS switching to async", period=1.0,
                   dead=dead)
        value, running, reason = SWITCH.search(ps.logs()).groups()
        at_switch, version = _pushes(ps), ps.status()["version"]
        deferred_at_switch = _deferred(tmp_path / "client-0.log")
        # Training goes on in async: several more versions, from both clients
        wait_until(lambda: ps.status()["version"] >= version + 6 and _pushes(ps)["t.c1"] > at_switch["t.c1"], 300,
                   "training going on after the switch", period=1.0, dead=dead)

        # Assert: the switch, with its reason, in the log, the metric and the status
        assert (value, running) == ("async", "async")
        assert "> async_above 2" in reason and "t.c1" in reason  # the slowed client is the slowest
        status = ps.status()
        assert status["mode"] == "async"
        assert _mode_gauge(ps, "async") == 1.0 and _mode_gauge(ps, "sync") == 0.0
        assert ps.metric("geofed_aggregation_mode_advice") == 1  # the advice is still exported
        # The clients follow the live mode: the fast one no longer waits for the slow one's rounds, it pushes on
        # the versions its own deltas make (in sync both push once a round: their counts differ by at most one).
        # Its site's round share still holds what lands to 2 deltas for each of the other site's pushes (counted
        # from before the switch, when up to 2 may already have landed); a push beyond that comes back DEFERRED,
        # and the client drops it and retrains on the latest version.
        now = _pushes(ps)
        fast, slow = now["t.c0"] - at_switch["t.c0"], now["t.c1"] - at_switch["t.c1"]
        put_off = _deferred(tmp_path / "client-0.log") - deferred_at_switch
        assert slow >= 1 and fast + put_off >= slow + 2, (fast, put_off, slow)
        assert fast <= 2 * (slow + 1), (fast, slow)
        assert _deferred(tmp_path / "client-1.log") == 0  # the slow site never outruns the fast one
        # It started sync (auto's start): the round whose close switched it waited for both clients (both were
        # timed, so both active: a sync quorum of 2; before the slow one joined a round may hold one); after the
        # switch each delta is an outer step of its own (buffer_size 1).
        before, after = ps.logs().split(SWITCH.search(ps.logs()).group(0), 1)
        applied_before = re.findall(r"event=apply version=\d+ deltas=(\d+) clients=(\d+)", before)
        applied_after = re.findall(r"event=apply version=\d+ deltas=(\d+) clients=(\d+)", after)
        assert applied_before and applied_before[-1] == ("2", "2"), applied_before
        modes = re.findall(r"event=autotune knob=aggregation_mode .*", after)  # a switch back says why
        assert len(applied_after) >= 6 and all(a == ("1", "1") for a in applied_after), (applied_after, modes)
        # No round was dropped (the hand-checked no-loss/no-double-count proof is tests/ps/test_auto_mode_unit.py).
        assert "event=round_dropped" not in ps.logs()
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
        ps.kill()
