"""A client SIGKILLed mid-round is relaunched with a fresh token: it resumes, the version keeps advancing,
and its old token is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "ps"))
from psproc import PSProcess  # noqa: E402

from client_agent.corpus import stdlib_split  # noqa: E402
from geofed.protocol import geofed_pb2 as pb  # noqa: E402
from geofed.protocol import geofed_pb2_grpc as pb_grpc  # noqa: E402

GEOFED = str(Path(sys.executable).with_name("geofed"))
FED = {
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 64, "block_size": 64},
    "training": {"batch_size": 4, "local_steps": 10, "sync_interval_s": 3, "eval_every": 10, "eval_batches": 1},
    "aggregation": {"mode": "async", "buffer_size": 1},
    "codec": {"name": "int8"},
}


def _client(ps, tmp_path, i, token, data):
    token_file = tmp_path / f"token-{i}"
    token_file.write_text(token)
    log = open(tmp_path / f"client-{i}.log", "ab")  # noqa: SIM115 - owned by the process
    return subprocess.Popen(
        [GEOFED, "client", "--ps", ps.address, "--client-id", f"t.c{i}", "--token-file", str(token_file),
         "--data", str(data), "--work-dir", str(tmp_path / f"work-{i}"), "--insecure", "--seed", str(i)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1"},
    )


def _version(ps) -> int:
    with ps.admin() as admin:
        return admin.status()["version"]


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.3)


def _steps(work: Path) -> list[int]:
    path = work / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def federation(tmp_path):
    ps = PSProcess(tmp_path / "ps", FED).start()
    split = stdlib_split(2)
    lists = []
    for i, files in enumerate(split.clients):
        lst = tmp_path / f"client-{i}.list"
        lst.write_text("".join(f"{p}\n" for p in files[:40]))
        lists.append(lst)
    procs: list[subprocess.Popen] = []
    yield ps, lists, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
    ps.kill()


def test_sigkilled_client_relaunches_with_fresh_token_and_resumes(federation, tmp_path):
    ps, lists, procs = federation
    with ps.admin() as admin:
        tokens = [admin.create_token(f"t.c{i}", master=(i == 0))[0] for i in range(2)]
    procs += [_client(ps, tmp_path, i, tokens[i], lists[i]) for i in range(2)]
    work1 = tmp_path / "work-1"
    _wait(lambda: len(_steps(work1)) >= 2, 180, "client 1 never synced twice")

    procs[1].send_signal(signal.SIGKILL)  # preempted mid-round: no goodbye, no final push
    procs[1].wait(10)
    steps_before = _steps(work1)
    version_at_kill = _version(ps)

    with ps.admin() as admin:
        fresh = admin.create_token("t.c1")[0]
    procs.append(_client(ps, tmp_path, 1, fresh, lists[1]))
    _wait(lambda: len(_steps(work1)) > len(steps_before), 180, "relaunched client never synced")

    log = (tmp_path / "client-1.log").read_text()
    assert "event=resumed" in log  # optimizer state and data position came back from its checkpoint
    resumed_steps = _steps(work1)[len(steps_before):]
    assert resumed_steps[0] > steps_before[-1] - 10  # continued near its last sync, not from step 0
    _wait(lambda: _version(ps) > version_at_kill + 1, 120, "federation stopped advancing")

    stub = pb_grpc.ParameterServerStub(ps.channel())
    with pytest.raises(grpc.RpcError) as err:
        stub.Join(pb.JoinRequest(token=tokens[1], client_id="t.c1"), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
