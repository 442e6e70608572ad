"""`geofed wan`: flags become a LinkProfile, bad flags are usage errors, and the command runs until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pytest import CaptureFixture
from wan_helpers import LoopbackServer, round_trip

from geofed_apps.wan import LinkProfile, Outage, WanProxy
from geofed_apps.wan.cli import add_commands, profile_from_args, serve

REPO = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="geofed")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["wan", *argv])


def test_flags_override_the_profile_shorthand() -> None:
    args = parse(
        "--target", "127.0.0.1:50051", "--profile", "50ms/10ms/20MBps/40MBps,reset@30s",
        "--latency-ms", "80", "--down", "100Mbps", "--outage", "blackhole@60s+10s", "--seed", "4",
    )  # fmt: skip
    assert args.target == ("127.0.0.1", 50051)
    assert profile_from_args(args) == LinkProfile(
        latency_ms=80,
        jitter_ms=10,
        up_bytes_per_s=20_000_000,
        down_bytes_per_s=12_500_000,
        outages=[Outage(kind="reset", at_s=30), Outage(kind="blackhole", at_s=60, duration_s=10)],
        seed=4,
    )


def test_no_flags_mean_a_clean_link() -> None:
    assert profile_from_args(parse("--target", "[::1]:7")) == LinkProfile()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "localhost"], "must be HOST:PORT"),
        (["--target", "localhost:0"], "needs a real port"),
        (["--target", "localhost:99999"], "outside 0-65535"),
        (["--target", "localhost:1", "--up", "20MB"], "must look like '20MBps'"),
        (["--target", "localhost:1", "--outage", "blackhole@5s"], "needs duration_s > 0"),
        (["--target", "localhost:1", "--profile", "50"], "with a unit"),
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str], message: str, capsys: CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_invalid_numbers_are_reported_not_raised(capsys: CaptureFixture[str]) -> None:
    args = parse("--target", "127.0.0.1:1", "--latency-ms", "-5")
    assert args.func(args) == 2
    assert "latency_ms" in capsys.readouterr().err


@pytest.mark.timeout(20)
def test_serve_forwards_until_stopped(echo_server: LoopbackServer, capsys: CaptureFixture[str]) -> None:
    proxy = WanProxy("127.0.0.1", echo_server.port, LinkProfile(latency_ms=20))
    stop = threading.Event()
    runner = threading.Thread(target=serve, args=(proxy, stop), kwargs={"stats_every_s": 0.05})
    runner.start()
    try:
        while "link" not in capsys.readouterr().out and runner.is_alive():
            stop.wait(0.01)
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            assert round_trip(sock) >= 0.04
    finally:
        stop.set()
        runner.join(10)
    assert not runner.is_alive()
    assert "stopped" in capsys.readouterr().out


@pytest.mark.timeout(30)
def test_command_runs_in_the_foreground_until_ctrl_c(echo_server: LoopbackServer) -> None:
    """`python -m geofed_apps.wan.cli` listens, forwards with the delay, and exits 0 on SIGINT."""
    process = subprocess.Popen(
        [sys.executable, "-m", "geofed_apps.wan.cli", f"--target=127.0.0.1:{echo_server.port}", "--latency-ms=30"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()  # "geofed wan: 127.0.0.1:PORT -> 127.0.0.1:ECHO"
        port = int(banner.split("->")[0].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            assert round_trip(sock) >= 0.06
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "stopped" in out and "bytes_up=4" in out


def test_importing_the_command_stays_light() -> None:
    """`geofed --help` imports every subsystem's cli module; ours must not pull in pydantic or asyncio."""
    probe = "import sys, geofed_apps.wan.cli; print(sorted({'pydantic', 'asyncio'} & set(sys.modules)))"
    command = [sys.executable, "-c", probe]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
