"""A client SIGKILLed mid-round is relaunched with a fresh token: it resumes, the version keeps advancing,
and its old token is refused."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import grpc
import pytest

from client_agent.corpus import stdlib_split, write_file_list
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed_apps.launch import start_client, stop, wait_until
from geofed_testing.procs import PSNode

FED = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 64, "block_size": 64},
    "training": {"batch_size": 4, "local_steps": 10, "sync_interval_s": 3, "eval_every": 10, "eval_batches": 1},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "int8"},
}


def _client(ps, tmp_path, i, token, data) -> subprocess.Popen:
    return start_client(token, tmp_path / f"token-{i}", tmp_path / f"client-{i}.log", ps=ps.address,
                        client_id=f"t.c{i}", data=data, work_dir=tmp_path / f"work-{i}", seed=i)


def _version(ps) -> int:
    return ps.status()["version"]


def _steps(work: Path) -> list[int]:
    path = work / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def federation(tmp_path):
    ps = PSNode(tmp_path / "ps", FED).start()
    split = stdlib_split(2)
    lists = [write_file_list(tmp_path / f"client-{i}.list", files[:40]) for i, files in enumerate(split.clients)]
    procs: list[subprocess.Popen] = []
    yield ps, lists, procs
    for p in procs:
        stop(p, signal.SIGKILL)
    ps.kill()


def test_sigkilled_client_relaunches_with_fresh_token_and_resumes(federation, tmp_path):
    ps, lists, procs = federation
    with ps.admin() as admin:
        tokens = [admin.create_token(f"t.c{i}", master=(i == 0))[0] for i in range(2)]
    procs += [_client(ps, tmp_path, i, tokens[i], lists[i]) for i in range(2)]
    work1 = tmp_path / "work-1"
    wait_until(lambda: len(_steps(work1)) >= 2, 180, "client 1 syncing twice", period=0.3)

    procs[1].send_signal(signal.SIGKILL)  # preempted mid-round: no goodbye, no final push
    procs[1].wait(10)
    steps_before = _steps(work1)
    version_at_kill = _version(ps)

    with ps.admin() as admin:
        fresh = admin.create_token("t.c1")[0]
    procs.append(_client(ps, tmp_path, 1, fresh, lists[1]))
    wait_until(lambda: len(_steps(work1)) > len(steps_before), 180, "the relaunched client syncing", period=0.3)

    log = (tmp_path / "client-1.log").read_text()
    assert "event=resumed" in log  # optimizer state and data position came back from its checkpoint
    resumed_steps = _steps(work1)[len(steps_before):]
    assert resumed_steps[0] > steps_before[-1] - 10  # continued near its last sync, not from step 0
    wait_until(lambda: _version(ps) > version_at_kill + 1, 120, "the federation advancing", period=0.3)

    stub = pb_grpc.ParameterServerStub(ps.channel())
    with pytest.raises(grpc.RpcError) as err:
        stub.Join(pb.JoinRequest(token=tokens[1], client_id="t.c1"), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

