"""`geofed local --chaos` end to end: real PS and client processes, preempted and relaunched on schedule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from geofed_apps.chaos import ChaosSpec, build_schedule

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.long
def test_local_run_under_preemptions_relaunches_with_fresh_tokens_and_still_learns(tmp_path):
    # Prepare: the schedule the run must follow (2 clients, 40 s, --seed's default 0).
    expected = build_schedule(ChaosSpec(preempt_s=8), 2, 40, 0)
    assert expected, "the schedule has no fault to check"

    # Execute
    out = subprocess.run(
        [GEOFED, "local", "--chaos", "preempt=8", "--duration", "40", "--clients", "2", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )

    # Assert: the run finished with its summary.
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))
    chaos_log = (run / "logs" / "chaos.log").read_text()
    faults = re.findall(r"^event=chaos fault=preempt client=local\.client-(\d) t=[0-9.]+ scheduled_t=([0-9.]+)$",
                        chaos_log, re.MULTILINE)
    skipped = re.findall(r"^event=chaos fault=preempt .* skipped=client_exited$", chaos_log, re.MULTILINE)
    # Every scheduled preemption happened, at its time and on its client (none finds a client finished:
    # the last fault falls at 3/4 of the run).
    assert [(str(f.client), f"{f.at_s:.1f}") for f in expected] == faults and not skipped, chaos_log
    relaunches = re.findall(r"^event=chaos_relaunch client=local\.client-(\d) exit_code=(-?\d+) token=fresh",
                            chaos_log, re.MULTILINE)
    assert [c for c, _ in relaunches] == [c for c, _ in faults]
    # SIGTERM'd agents stop as preempted (143) or, still starting, by the signal itself; none needed SIGKILL.
    assert {code for _, code in relaunches} <= {"143", "-15"}, relaunches
    assert f"chaos: {len(expected)} preemptions, 0 kills, 0 flaps, 0 PS restarts" in out.stdout
    for line in chaos_log.splitlines():
        assert line in out.stdout  # each fault is said on the run's own output too
    # Relaunched clients joined with their fresh one-time tokens: more one-time joins than first launches,
    # and at most one per process each client ran.
    joins = {i: len(re.findall(rf"event=joined client=local\.client-{i} via=one-time",
                               (run / "logs" / f"client-{i}.log").read_text())) for i in (0, 1)}
    launched = {i: 1 + sum(c == str(i) for c, _ in relaunches) for i in (0, 1)}
    assert sum(joins.values()) > 2, joins
    assert all(1 <= joins[i] <= launched[i] for i in (0, 1)), (joins, launched)
    ps_log = (run / "logs" / "ps.log").read_text()
    assert len(re.findall(r"event=join client=local\.client-\d", ps_log)) >= sum(joins.values())
    # The model still learned, and the goodput is reported, after the loss line.
    m = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    assert m, out.stdout[-2000:]
    assert float(m.group(2)) < float(m.group(1)) - 0.5, m.group(0)
    goodput = re.search(r"^goodput: ([0-9.]+)% of trained tokens reached the global model$", out.stdout,
                        re.MULTILINE)
    assert goodput and 0 < float(goodput.group(1)) <= 100, out.stdout[-2000:]
    assert goodput.start() > m.start()


@pytest.mark.long
def test_local_run_under_kills_link_flaps_and_a_ps_restart_follows_its_schedule(tmp_path):
    # Prepare: the schedule the run must follow (seed 1 gives each kind of fault at least once).
    spec = ChaosSpec(kill_s=15, flap_s=15, ps_restarts=1)
    expected = build_schedule(spec, 2, 40, 1)
    kinds = {f.kind for f in expected}
    assert kinds == {"kill", "flap", "ps-restart"}, expected

    # Execute
    out = subprocess.run(
        [GEOFED, "local", "--chaos", "kill=15,flap=15,ps-restart=1", "--link", "20ms", "--seed", "1",
         "--duration", "40", "--clients", "2", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )

    # Assert: every fault was done, in order, and did what it says.
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))
    chaos_log = (run / "logs" / "chaos.log").read_text()
    done = re.findall(r"^event=chaos fault=(\S+) client=(\S+) t=[0-9.]+ scheduled_t=([0-9.]+)$", chaos_log,
                      re.MULTILINE)
    ids = {None: "ps", 0: "local.client-0", 1: "local.client-1"}
    assert done == [(f.kind, ids[f.client], f"{f.at_s:.1f}") for f in expected], chaos_log
    kills = [f for f in expected if f.kind == "kill"]
    assert re.findall(r"^event=chaos_relaunch client=(\S+) exit_code=(-?\d+) token=fresh", chaos_log,
                      re.MULTILINE) == [(ids[f.client], "-9") for f in kills]
    # Each flap cut the client's emulated link: its count of blackholes rose by one.
    cuts = re.findall(r"^event=chaos_link_cut client=(\S+) seconds=5 link_blackholes=(\d+)$", chaos_log, re.MULTILINE)
    flaps = [ids[f.client] for f in expected if f.kind == "flap"]
    assert [c for c, _ in cuts] == flaps
    assert all(int(n) == flaps[: k + 1].count(c) for k, (c, n) in enumerate(cuts)), cuts
    # The PS was stopped and started on its checkpoint: a second listening line, at a version past Θ0's.
    listening = re.findall(r"event=listening port=(\d+) .* version=(\d+)", (run / "logs" / "ps.log").read_text())
    assert len(listening) == 2 and listening[0][0] == listening[1][0] and int(listening[1][1]) >= 1, listening
    assert (f"chaos: 0 preemptions, {len(kills)} kills, {len(flaps)} flaps, 1 PS restarts") in out.stdout
    m = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    assert m and float(m.group(2)) < float(m.group(1)) - 0.5, out.stdout[-2000:]
    assert re.search(r"^goodput: [0-9.]+% of trained tokens reached the global model$", out.stdout, re.MULTILINE)


@pytest.mark.long
def test_local_run_where_one_site_joins_mid_run_and_another_leaves_for_good(tmp_path):
    # Prepare: the schedule the run must follow (3 clients, 40 s, seed 0): one join, one leave.
    spec = ChaosSpec(joins=1, leaves=1)
    expected = build_schedule(spec, 3, 40, 0)
    (join,) = [f for f in expected if f.kind == "join"]
    (leave,) = [f for f in expected if f.kind == "leave"]

    # Execute
    out = subprocess.run(
        [GEOFED, "local", "--chaos", "join=1,leave=1", "--duration", "40", "--clients", "3",
         "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )

    # Assert: both faults were done at their times, and the run ended cleanly (a site that left is no failure).
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = Path(re.search(r"^run directory: (.+)$", out.stdout, re.MULTILINE).group(1))
    chaos_log = (run / "logs" / "chaos.log").read_text()
    done = re.findall(r"^event=chaos fault=(\S+) client=local\.client-(\d) t=[0-9.]+ scheduled_t=([0-9.]+)$",
                      chaos_log, re.MULTILINE)
    assert done == [(f.kind, str(f.client), f"{f.at_s:.1f}") for f in expected], chaos_log
    assert re.search(rf"^event=chaos_joined client=local\.client-{join.client} token=fresh", chaos_log, re.M)
    left = re.search(rf"^event=chaos_left client=local\.client-{leave.client} exit_code=(-?\d+) relaunch=none$",
                     chaos_log, re.MULTILINE)
    assert left and left.group(1) in ("143", "-15"), chaos_log  # stopped as preempted, never SIGKILLed
    assert "chaos: 0 preemptions, 0 kills, 0 flaps, 0 PS restarts, 1 joins, 1 leaves" in out.stdout
    # The joining site's client started once, mid-run: the PS had applied other sites' deltas before it joined,
    # and its own deltas reached the model after.
    ps_log = (run / "logs" / "ps.log").read_text()
    first_join = re.search(rf"event=join client=\S*local\.client-{join.client}\b", ps_log)
    assert first_join and re.search(r"event=push .* status=APPLIED", ps_log[: first_join.start()]), ps_log[-3000:]
    assert re.search(rf"event=push client=\S*local\.client-{join.client}\b.* status=APPLIED", ps_log)
    # The leaving site's client ran once and was not relaunched: one join in its log.
    leaver_log = (run / "logs" / f"client-{leave.client}.log").read_text()
    assert len(re.findall(r"event=joined client=local\.client-\d via=one-time", leaver_log)) == 1
    m = re.search(r"^eval loss: ([0-9.]+) -> ([0-9.]+)$", out.stdout, re.MULTILINE)
    assert m and float(m.group(2)) < float(m.group(1)) - 0.5, out.stdout[-2000:]
    assert re.search(r"^goodput: [0-9.]+% of trained tokens reached the global model$", out.stdout, re.MULTILINE)
