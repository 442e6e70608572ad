"""geofed_testing.podman's Container against real containers: grace periods, exit codes, logs, env."""

from __future__ import annotations

import time

import pytest

from geofed_testing.podman import Container, run_args

from .conftest import PS_IMAGE, Pods, require

pytestmark = pytest.mark.containers
POD = {"securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True}}
TERM_HANDLER = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True), sys.exit(3)))
print('up', flush=True)
time.sleep(120)
"""
IGNORES_TERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('up', flush=True)
time.sleep(120)
"""


def _started(pods: Pods, name: str, code: str) -> Container:
    container = {"name": "c", "image": PS_IMAGE, "command": ["python", "-c", code]}
    started = pods.start(name, {**POD, "containers": [container]}, PS_IMAGE)
    deadline = time.monotonic() + 60
    while "up" not in started.logs():
        assert time.monotonic() < deadline, started.logs()
        time.sleep(0.2)
    return started


def test_stop_sends_sigterm_first(pods: Pods) -> None:
    require(PS_IMAGE)
    started = _started(pods, "geofed-test-term", TERM_HANDLER)
    t0 = time.monotonic()
    assert started.stop(grace_s=20) == 3
    assert time.monotonic() - t0 < 15
    assert "got SIGTERM" in started.logs()


def test_stop_kills_after_the_grace_period(pods: Pods) -> None:
    require(PS_IMAGE)
    started = _started(pods, "geofed-test-kill", IGNORES_TERM)
    t0 = time.monotonic()
    assert started.stop(grace_s=3) == 137  # SIGKILL
    assert 2.5 < time.monotonic() - t0 < 30


def test_env_and_identity_reach_the_process(pods: Pods) -> None:
    require(PS_IMAGE)
    pods.add({"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}})  # "secret"
    container = {
        "name": "c", "image": PS_IMAGE, "command": ["sh", "-c", "echo $V $(id -u):$(id -g) $(id -G)"],
        "env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    }  # fmt: skip
    spec = {"securityContext": {**POD["securityContext"], "fsGroup": 2000}, "containers": [container]}
    started = pods.start("geofed-test-env", spec, PS_IMAGE)
    assert started.wait(60) == 0
    assert started.logs().split() == ["secret", "10001:10001", "10001", "2000"]
    assert run_args(spec, container, name="x", lookup=pods.lookup).count("--group-add") == 1
