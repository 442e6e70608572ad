"""`geofed local --chaos`: the spec, the seeded schedule, the runner on real processes, and bad input."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from geofed_apps.chaos import (
    END_FRACTION,
    NOT_JOINED,
    START_FRACTION,
    ChaosRunner,
    ChaosSpec,
    ChaosSpecError,
    Fault,
    build_schedule,
    check_spec,
    joining,
    leaving,
    parse_spec,
    window,
)
from geofed_apps.launch import wait_until

GEOFED = str(Path(sys.executable).with_name("geofed"))


@pytest.mark.parametrize(("text", "expected"), [
    ("preempt=60,kill=0,flap=90,ps-restart=1", ChaosSpec(preempt_s=60, flap_s=90, ps_restarts=1)),
    ("preempt=8", ChaosSpec(preempt_s=8)),
    (" kill=2.5 , ps-restart=3 ", ChaosSpec(kill_s=2.5, ps_restarts=3)),
    ("join=1,leave=2", ChaosSpec(joins=1, leaves=2)),
])
def test_spec_is_parsed(text, expected):
    assert parse_spec(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("preempt=x", "preempt='x': expected mean seconds between faults"),
    ("ps-restart=1.5", "ps-restart='1.5': expected a whole number of restarts"),
    ("boom=3", "unknown fault 'boom'; known: preempt, kill, flap, ps-restart, join, leave"),
    ("join=0.5", "join='0.5': expected a whole number of joins"),
    ("leave=x", "leave='x': expected a whole number of leaves"),
    ("preempt", "'preempt' is not KEY=VALUE"),
    ("preempt=-1", "preempt=-1: must be 0 (off) or a positive finite number"),
    ("preempt=inf", "preempt=inf: must be 0 (off)"),
    ("preempt=5,,kill=3", "empty entry"),
    ("preempt=5,preempt=6", "preempt is given twice"),
])
def test_bad_spec_says_why(text, message):
    with pytest.raises(ChaosSpecError) as err:
        parse_spec(text)
    assert message in str(err.value)


def test_same_seed_same_schedule_other_seed_other_schedule():
    spec = ChaosSpec(preempt_s=20, kill_s=50, ps_restarts=2)

    first, again = build_schedule(spec, 3, 600, seed=7), build_schedule(spec, 3, 600, seed=7)
    other = build_schedule(spec, 3, 600, seed=8)

    assert first == again
    assert first != other
    assert {f.kind for f in first} == {"preempt", "kill", "ps-restart"}


def test_schedule_is_in_time_order_inside_the_window():
    schedule = build_schedule(ChaosSpec(preempt_s=10, kill_s=10, flap_s=10, ps_restarts=4), 4, 200, seed=1)
    start, end = window(200)

    assert [f.at_s for f in schedule] == sorted(f.at_s for f in schedule)
    assert all(start <= f.at_s <= end for f in schedule)
    assert (start, end) == (START_FRACTION * 200, END_FRACTION * 200)
    assert all(f.client is None for f in schedule if f.kind == "ps-restart")
    assert {f.client for f in schedule if f.kind != "ps-restart"} == {0, 1, 2, 3}


def test_rates_are_respected_within_the_run():
    # A long run: each client's count of a fault is Poisson with mean (window / mean gap) = 650 here;
    # five standard deviations (about 127) is the tolerance on a total of 4 clients.
    spec = ChaosSpec(preempt_s=10, kill_s=40)
    start, end = window(10_000)
    schedule = build_schedule(spec, 4, 10_000, seed=3)

    preempts = sum(f.kind == "preempt" for f in schedule)
    kills = sum(f.kind == "kill" for f in schedule)
    expected_preempts, expected_kills = 4 * (end - start) / 10, 4 * (end - start) / 40

    assert abs(preempts - expected_preempts) < 5 * expected_preempts ** 0.5
    assert abs(kills - expected_kills) < 5 * expected_kills ** 0.5
    assert sum(f.kind == "ps-restart" for f in build_schedule(ChaosSpec(ps_restarts=3), 2, 100, 0)) == 3


def test_turning_one_fault_on_leaves_the_others_times():
    alone = build_schedule(ChaosSpec(preempt_s=15), 2, 300, seed=5)
    both = build_schedule(ChaosSpec(preempt_s=15, kill_s=30), 2, 300, seed=5)

    assert [f for f in both if f.kind == "preempt"] == list(alone)


def test_no_fault_no_schedule():
    assert build_schedule(ChaosSpec(), 3, 100, seed=0) == ()
    assert not ChaosSpec().enabled


def test_flap_needs_a_link_and_ps_restart_a_single_ps():
    assert "needs --link" in check_spec(ChaosSpec(flap_s=30), link=False, single_ps=True, clients=3)
    assert check_spec(ChaosSpec(flap_s=30), link=True, single_ps=True, clients=3) is None
    assert "needs a single PS" in check_spec(ChaosSpec(ps_restarts=1), link=False, single_ps=False, clients=3)


def test_joining_and_leaving_sites_need_clients_beside_the_master():
    why = check_spec(ChaosSpec(joins=2, leaves=1), link=False, single_ps=True, clients=3)
    assert why.startswith("--chaos join=2,leave=1 needs 4 clients or more") and "--clients is 3" in why
    assert check_spec(ChaosSpec(joins=2, leaves=1), link=False, single_ps=True, clients=4) is None


def test_joining_and_leaving_sites_are_seeded_never_the_master_and_never_both():
    spec = ChaosSpec(joins=2, leaves=2)
    for seed in range(20):
        joins, leaves = joining(spec, 5, seed), leaving(spec, 5, seed)
        assert len(joins) == 2 and len(leaves) == 2 and 0 not in joins + leaves and not set(joins) & set(leaves)
        assert (joins, leaves) == (joining(spec, 5, seed), leaving(spec, 5, seed))
    assert len({joining(spec, 5, seed) for seed in range(20)}) > 1  # the seed draws which sites
    schedule = build_schedule(ChaosSpec(joins=1, leaves=1, preempt_s=30), 3, 100, seed=4)
    start, end = window(100)
    assert [f.client for f in schedule if f.kind == "join"] == list(joining(ChaosSpec(joins=1), 3, 4))
    assert [f.client for f in schedule if f.kind == "leave"] == list(leaving(ChaosSpec(joins=1, leaves=1), 3, 4))
    assert all(start <= f.at_s < end for f in schedule)
    # Turning joins and leaves on leaves the preemptions' times as they were.
    assert [f for f in schedule if f.kind == "preempt"] == list(build_schedule(ChaosSpec(preempt_s=30), 3, 100, 4))


def _sleeper(tmp_path: Path, name: str) -> subprocess.Popen:
    """A real process that exits 0 on SIGTERM after writing a file, as a preempted agent exits cleanly."""
    ready = tmp_path / f"{name}.ready"
    code = ("import signal, sys, time, pathlib\n"
            f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(tmp_path / name)!r}).touch(), sys.exit(0)))\n"
            f"pathlib.Path({str(ready)!r}).touch()\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    wait_until(ready.exists, 30, f"{name} to take SIGTERM")
    return proc


def test_runner_preempts_kills_and_relaunches_real_processes(tmp_path):
    # Prepare: two real client stand-ins; a relaunch starts a new one and records its duration.
    clients = [_sleeper(tmp_path, "c0-term-1"), _sleeper(tmp_path, "c1-term-1")]
    relaunched: list[tuple[int, float]] = []
    said: list[str] = []

    def relaunch(i: int, duration_s: float) -> subprocess.Popen:
        relaunched.append((i, duration_s))
        return _sleeper(tmp_path, f"c{i}-term-{len(relaunched) + 1}")

    schedule = (Fault(2.0, "preempt", 0), Fault(3.0, "kill", 1), Fault(50.0, "preempt", 1))
    runner = ChaosRunner(schedule, 40.0, clients, ["c0", "c1"], relaunch=relaunch, blackhole=None,
                         restart_ps=None, say=said.append, log=tmp_path / "chaos.log")
    first = list(clients)
    try:
        # Execute: nothing is due at 1 s; at 10 s both client faults are, the one at 50 s is not.
        runner.tick(1.0)
        assert said == []
        runner.tick(10.0)

        # Assert
        assert first[0].returncode == 0 and (tmp_path / "c0-term-1").exists()  # SIGTERM, clean exit awaited
        assert first[1].returncode == -signal.SIGKILL and not (tmp_path / "c1-term-1").exists()
        assert relaunched == [(0, 30.0), (1, 30.0)]  # the rest of the run
        assert clients[0] is not first[0] and clients[1] is not first[1] and clients[0].poll() is None
        assert runner.summary() == "chaos: 1 preemptions, 1 kills, 0 flaps, 0 PS restarts, 0 joins, 0 leaves"
        assert "event=chaos fault=preempt client=c0 t=10.0 scheduled_t=2.0" in said
        assert "event=chaos fault=kill client=c1 t=10.0 scheduled_t=3.0" in said
        assert (tmp_path / "chaos.log").read_text().splitlines() == said
    finally:
        for proc in [*first, *clients]:
            proc.kill()
            proc.wait()


def test_runner_skips_a_client_that_has_finished(tmp_path):
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    said: list[str] = []
    runner = ChaosRunner((Fault(1.0, "kill", 0),), 10.0, [done], ["c0"], relaunch=lambda i, d: done,
                         blackhole=None, restart_ps=None, say=said.append)

    runner.tick(2.0)

    assert said == ["event=chaos fault=kill client=c0 t=2.0 skipped=client_exited"]
    assert runner.summary() == "chaos: 0 preemptions, 0 kills, 0 flaps, 0 PS restarts, 0 joins, 0 leaves"


def test_runner_starts_a_joining_site_late_and_stops_a_leaving_one_for_good(tmp_path):
    # Prepare: client 1's site joins at 3 s (its slot empty until then), client 0's leaves at 4 s; a
    # preemption of each is scheduled too, one before client 1 joins and one after client 0 left.
    leaver = _sleeper(tmp_path, "c0-term")
    clients: list = [leaver, NOT_JOINED]
    started: list[tuple[int, float]] = []
    said: list[str] = []

    def launch(i: int, duration_s: float) -> subprocess.Popen:
        started.append((i, duration_s))
        return _sleeper(tmp_path, f"c{i}-started")

    schedule = (Fault(2.0, "preempt", 1), Fault(3.0, "join", 1), Fault(4.0, "leave", 0), Fault(5.0, "preempt", 0))
    runner = ChaosRunner(schedule, 40.0, clients, ["c0", "c1"], relaunch=launch, blackhole=None,
                         restart_ps=None, say=said.append)
    try:
        # Execute
        runner.tick(2.5)
        assert clients[1] is NOT_JOINED and started == []  # a preemption cannot reach a site not joined yet
        runner.tick(10.0)

        # Assert: client 1 was started once, for the rest of the run; client 0 stopped with SIGTERM (its clean
        # exit awaited) and was never relaunched, so the later preemption found it gone.
        assert started == [(1, 30.0)] and clients[1].poll() is None
        assert clients[0] is leaver and leaver.returncode == 0 and (tmp_path / "c0-term").exists()
        assert runner.left == {0}
        assert said == [
            "event=chaos fault=preempt client=c1 t=2.5 skipped=not_joined",
            "event=chaos fault=join client=c1 t=10.0 scheduled_t=3.0",
            "event=chaos_joined client=c1 token=fresh duration_s=30",
            "event=chaos fault=leave client=c0 t=10.0 scheduled_t=4.0",
            "event=chaos_left client=c0 exit_code=0 relaunch=none",
            "event=chaos fault=preempt client=c0 t=10.0 skipped=client_exited",
        ]
        assert runner.summary() == "chaos: 0 preemptions, 0 kills, 0 flaps, 0 PS restarts, 1 joins, 1 leaves"
    finally:
        for proc in (leaver, clients[1]):
            if proc is not NOT_JOINED:
                proc.kill()
                proc.wait()


def test_runner_flaps_links_and_restarts_the_ps(tmp_path):
    calls: list[tuple] = []
    runner = ChaosRunner((Fault(1.0, "flap", 1), Fault(2.0, "ps-restart")), 10.0,
                         [_sleeper(tmp_path, "a"), _sleeper(tmp_path, "b")], ["c0", "c1"],
                         relaunch=lambda i, d: None, blackhole=lambda i, s: calls.append(("blackhole", i, s)) or 1,
                         restart_ps=lambda: calls.append(("restart",)), say=lambda line: None)
    try:
        runner.tick(5.0)
    finally:
        for proc in runner.clients:
            proc.kill()
            proc.wait()

    assert calls == [("blackhole", 1, 5.0), ("restart",)]
    assert runner.summary() == "chaos: 0 preemptions, 0 kills, 1 flaps, 1 PS restarts, 0 joins, 0 leaves"


@pytest.mark.parametrize(("args", "message"), [
    (["--chaos", "preempt=soon"], "geofed local: --chaos: preempt='soon': expected mean seconds between faults"),
    (["--chaos", "flap=30"], "geofed local: --chaos flap needs --link"),
    (["--chaos", "ps-restart=1", "--ps-groups", "2", "--clients", "2"], "geofed local: --chaos ps-restart needs "
                                                                         "a single PS"),
    (["--chaos", "join=1,leave=1", "--clients", "2"], "geofed local: --chaos join=1,leave=1 needs 3 clients or more"),
])
def test_bad_chaos_is_one_error_line_before_anything_starts(tmp_path, args, message):
    out = subprocess.run([GEOFED, "local", "--run-dir", str(tmp_path / "runs"), *args],
                         capture_output=True, text=True, timeout=120)

    assert out.returncode == 2
    assert out.stderr.strip().startswith(message), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stdout == ""
    assert not (tmp_path / "runs").exists()  # no run directory: nothing started
