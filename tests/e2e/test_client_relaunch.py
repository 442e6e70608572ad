"""A client SIGKILLed mid-round is relaunched with a fresh token: it resumes, the version keeps advancing,
and its old token is refused. One SIGKILLed mid-push resends its upload instead of training again."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import grpc
import pytest

from client_agent.data.corpus import stdlib_split, write_file_list
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed_apps.launch import start_client, stop, wait_until
from geofed_apps.wan import LinkProfile, WanProxy
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


PUSH_FED = {**FED, "training": {"batch_size": 4, "local_steps": 3, "sync_interval_s": 60, "eval_every": 100,
                                "eval_batches": 1}}


def _applied(ps: PSNode, client_id: str) -> list[str]:
    """Upload ids the PS applied from `client_id`, in order (one log line per completed push; Θ0's first)."""
    return re.findall(rf"event=push client={re.escape(client_id)} upload=(\w+) status=APPLIED", ps.logs())


@pytest.mark.parametrize(
    "overlap",
    [False, pytest.param(True, marks=pytest.mark.slow, id="overlapped")],  # overlapped: about 30 s
)
def test_client_preempted_mid_push_resends_its_upload_and_does_not_retrain(tmp_path, overlap):
    """The PS applies round 2's delta but its answer never reaches the client, which is then SIGKILLed.

    The relaunch must resend that same upload (answered DUPLICATE) and go on with round 3's data: neither
    retrain round 2 nor push its data twice. Overlapped (training.overlap_sync), round 3 was training beside
    the unanswered push when the client was killed: those batches are trained again, and pushed once; round
    1 is recorded when it settles, at the end of round 2, just before round 2's push.
    """
    # Prepare: one client behind a link whose PS→client direction can be throttled to a trickle.
    fed = {**PUSH_FED, "training": {**PUSH_FED["training"], "overlap_sync": overlap}}
    ps = PSNode(tmp_path / "ps", fed).start()
    proxy = WanProxy("127.0.0.1", ps.port, LinkProfile())
    proxy.start()
    procs: list[subprocess.Popen] = []
    try:
        data = write_file_list(tmp_path / "data.list", stdlib_split(2).clients[0][:40])
        with ps.admin() as admin:
            first, fresh = admin.create_token("t.p0", master=True)[0], admin.create_token("t.p0")[0]
        work = tmp_path / "work"
        # slowdown: a round takes seconds, so the link is throttled while round 2 is still training.
        options = {"client_id": "t.p0", "data": data, "work_dir": work, "slowdown": 10}
        procs.append(start_client(first, tmp_path / "token-a", tmp_path / "client-a.log",
                                  ps=f"127.0.0.1:{proxy.port}", **options))
        wait_until(lambda: _steps(work) == [3], 180, "the first sync", period=0.05)

        # Execute: throttle answers (the push still fits HTTP/2's first window); once the PS has applied
        # round 2's push, and before its answer can trickle through, preempt the client.
        proxy.set_profile(LinkProfile(down_bytes_per_s=50))
        wait_until(lambda: len(_applied(ps, "t.p0")) == 3, 120, "round 2's push applied", period=0.05)
        stop(procs[0], signal.SIGKILL)
        if overlap:
            log = (tmp_path / "client-a.log").read_text()
            assert "overlap_sync: the send and the next model overlap" in log
            assert "event=overlap_folded client=t.p0 version=2 based_on=1" in log, log[-3000:]
        assert _steps(work) == [3]  # the client never learned of round 2's outcome
        in_flight = _applied(ps, "t.p0")[2]
        procs.append(start_client(fresh, tmp_path / "token-b", tmp_path / "client-b.log", ps=ps.address,
                                  max_rounds=1, **options))
        assert procs[1].wait(180) == 0, (tmp_path / "client-b.log").read_text()[-3000:]

        # Assert: the in-flight upload was resent and recognised, round 3 came next, nothing counted twice.
        log = (tmp_path / "client-b.log").read_text()
        assert f"event=upload_resent upload={in_flight} status=DUPLICATE" in log
        assert _steps(work) == [3, 9]  # steps 4-6 (round 2) were not trained again
        applied = _applied(ps, "t.p0")
        assert len(applied) == len(set(applied)) == 4  # Θ0 and rounds 1, 2, 3
        assert ps.status()["version"] == 4  # Θ0 and three deltas, each once
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
        proxy.stop()
        ps.kill()
