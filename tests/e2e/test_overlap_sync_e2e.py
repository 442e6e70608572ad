"""The overlapped sync path over the wire: a real PS and a `geofed client` process with training.overlap_sync.

Preempted while a push is in flight (the PS applied it, its answer had not arrived, the next round was
being trained), the relaunched client resends that upload (DUPLICATE), retrains only the batches after it
and pushes each round's data once."""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from client_agent.corpus import stdlib_split, write_file_list
from geofed.wan import LinkProfile, WanProxy
from geofed_apps.launch import start_client, stop, wait_until
from geofed_testing.procs import PSNode
from tests.e2e.test_client_relaunch import PUSH_FED, _applied, _steps

OVERLAP_FED = {**PUSH_FED, "training": {**PUSH_FED["training"], "overlap_sync": True}}


@pytest.mark.slow  # about 30 s: a slowed-down client, a throttled link and a relaunch
def test_client_preempted_mid_overlap_resends_its_upload_and_retrains_only_what_followed(tmp_path):
    ps = PSNode(tmp_path / "ps", OVERLAP_FED).start()
    proxy = WanProxy("127.0.0.1", ps.port, LinkProfile())
    proxy.start()
    procs: list[subprocess.Popen] = []
    try:
        data = write_file_list(tmp_path / "data.list", stdlib_split(2).clients[0][:40])
        with ps.admin() as admin:
            first, fresh = admin.create_token("t.o0", master=True)[0], admin.create_token("t.o0")[0]
        work = tmp_path / "work"
        options = {"client_id": "t.o0", "data": data, "work_dir": work, "slowdown": 10}
        procs.append(
            start_client(
                first, tmp_path / "token-a", tmp_path / "client-a.log", ps=f"127.0.0.1:{proxy.port}", **options
            )
        )
        # Round 1 is recorded when it settles, at the end of round 2, just before round 2's push.
        wait_until(lambda: _steps(work) == [3], 180, "round 1 settled", period=0.05)
        proxy.set_profile(LinkProfile(down_bytes_per_s=50))  # round 2's answer and the next model trickle
        wait_until(lambda: len(_applied(ps, "t.o0")) == 3, 120, "round 2's push applied", period=0.05)
        stop(procs[0], signal.SIGKILL)  # while round 3 trains beside round 2's unanswered push
        log_a = (tmp_path / "client-a.log").read_text()
        assert "event=sync_path" in log_a and "overlap_sync: the send and the next model overlap" in log_a
        assert re.search(r"event=overlap_folded client=t\.o0 version=2 based_on=1", log_a), log_a[-3000:]
        assert _steps(work) == [3]  # round 2's outcome never reached the client
        in_flight = _applied(ps, "t.o0")[2]

        procs.append(
            start_client(fresh, tmp_path / "token-b", tmp_path / "client-b.log", ps=ps.address, max_rounds=1, **options)
        )
        assert procs[1].wait(180) == 0, (tmp_path / "client-b.log").read_text()[-3000:]

        log_b = (tmp_path / "client-b.log").read_text()
        assert f"event=upload_resent upload={in_flight} status=DUPLICATE" in log_b
        assert _steps(work) == [3, 9]  # round 3 trained from the data position after round 2, once pushed
        applied = _applied(ps, "t.o0")
        assert len(applied) == len(set(applied)) == 4  # Θ0 and rounds 1, 2, 3, each once
        assert ps.status()["version"] == 4
    finally:
        for p in procs:
            stop(p, signal.SIGKILL)
        proxy.stop()
        ps.kill()
