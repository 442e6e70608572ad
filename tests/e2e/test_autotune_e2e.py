"""Auto-tuning with real processes (issue 14, item 2): a sync federation of a fast and a 4x slowed client.

Each client tunes its sync interval from what it measured (upload, download, RTT, step time): the slowed
client gets fewer steps for the time it trains. The PS times both clients' rounds, sets the straggler timeout
from them and exports it, the round times and its sync/async advice. Logged with reasons, shown in metrics.
"""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from client_agent.data.corpus import stdlib_split, write_file_list
from geofed_apps.launch import start_client, stop, wait_until
from geofed_testing.procs import PSNode

FED = {
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 128, "block_size": 64},  # ~0.44 M params: pushes > 256 KiB
    "training": {"batch_size": 4, "local_steps": 10, "sync_interval_s": 3, "eval_every": 1000, "eval_batches": 1,
                 "torch_threads": 1},
    "aggregation": {"mode": "sync", "quorum": 1.0, "straggler_timeout_s": 120},
    "codec": {"name": "int16", "entropy": "none"},  # 2 bytes/param: every push is large enough to time
    "downlink": {"encoding": "fp32"},  # whole vectors down, in many chunks (--chunk-bytes): every transfer timed
    # On loopback a round's communication takes tens of ms: a small comm_fraction gives T of a few seconds.
    "autotune": {"interval": True, "comm_fraction": 0.01, "interval_min_s": 2, "interval_max_s": 20,
                 "straggler_timeout": True, "straggler_min_s": 1, "straggler_max_s": 60},
}
TUNED = re.compile(r"event=autotune client=(\S+) knob=sync_interval value=(\S+) steps=(\d+) reason='(.*)'")


def _tuned(log: str) -> list[tuple[float, int, str]]:
    """(T, H, reason) of each interval choice a client logged, measured ones only."""
    return [(float(m[2]), int(m[3]), m[4]) for m in TUNED.finditer(log) if "communication ~" in m[4]]


@pytest.mark.long
def test_interval_and_straggler_timeout_are_tuned_from_live_measurements(tmp_path):
    # Prepare
    ps = PSNode(tmp_path / "ps", FED, metrics=True, extra=["--chunk-bytes", "65536"]).start()
    split = stdlib_split(2)
    lists = [write_file_list(tmp_path / f"c{i}.list", files[:40]) for i, files in enumerate(split.clients)]
    procs: list[subprocess.Popen] = []
    logs = [tmp_path / "client-0.log", tmp_path / "client-1.log"]
    try:
        with ps.admin() as admin:
            tokens = [admin.create_token(f"t.c{i}", master=(i == 0))[0] for i in range(2)]
        for i, slowdown in enumerate((1.0, 4.0)):
            procs.append(start_client(tokens[i], tmp_path / f"token-{i}", logs[i], ps=ps.address,
                                      client_id=f"t.c{i}", data=lists[i], work_dir=tmp_path / f"work-{i}", seed=i,
                                      slowdown=slowdown))

        # Execute: run until both clients have tuned twice from measurements and the PS has set its timeout
        def tuned() -> bool:
            return (all(p.exists() and len(_tuned(p.read_text())) >= 2 for p in logs)
                    and "knob=straggler_timeout" in ps.logs()
                    and ps.metric("geofed_straggler_timeout_seconds") not in (0.0, 120.0))  # the gauge caught up

        wait_until(tuned, 300, "both clients tuning their interval and the PS its straggler timeout", period=1.0,
                   dead=lambda: next((f"client {i} exited" for i, p in enumerate(procs) if p.poll() is not None),
                                     None))

        # Assert: the clients' intervals, chosen from measurements, with their reasons
        fast, slow = (_tuned(p.read_text())[-1] for p in logs)
        for seconds, steps, reason in (fast, slow):
            assert 2 <= seconds <= 20 and steps >= 1
            assert "MB/s" in reason and "steps of" in reason
        # The slowed client trains the same kind of time in fewer steps: H / T is its steps per second.
        assert slow[1] / slow[0] < fast[1] / fast[0], (fast, slow)
        # The PS: each client's round time, the straggler timeout set from them, the mode advice.
        assert ps.metric("geofed_client_round_seconds") > 0
        timeout = ps.metric("geofed_straggler_timeout_seconds")
        assert 1 <= timeout <= 60 and timeout != 120
        # The metric is the last value logged (a round may close between a log line and this read: compare the last).
        logged = re.findall(r"knob=straggler_timeout value=([0-9.e+-]+) reason=[\"'](.*?quantile of \d+ clients?)",
                            ps.logs())
        assert logged, "no straggler_timeout choice logged with its reason"
        assert abs(float(logged[-1][0]) - timeout) <= 1e-6 * max(1.0, timeout) or any(
            abs(float(v) - timeout) <= 1e-6 * max(1.0, timeout) for v, _ in logged)
        assert ps.metric("geofed_aggregation_mode_advice") == 1  # exactly one mode advised
        assert ps.metric("geofed_client_speed_spread") >= 1
        assert ps.metric("geofed_client_local_steps") >= 2  # the H of each client's last push, summed
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
        ps.kill()
