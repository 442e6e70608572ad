"""The PS survives SIGKILL and SIGTERM: it resumes at its checkpointed version with the same bytes."""

from __future__ import annotations

import signal

import grpc
import numpy as np
import pytest

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.auth import bearer
from geofed_testing.procs import PSNode, assert_exits_with, signal_a_thread_other_than_main
from geofed_testing.wire import NUMEL, fetch_model, init_model, join, push, raw_session, rpc_code


def test_sigkill_then_restart_resumes_checkpointed_version_and_clients_rejoin(tmp_path):
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1}}).start()
    try:
        master = join(ps, "k.master", master=True, state_dir=tmp_path / "master")
        init_model(master)
        push(master, 1, np.full(NUMEL, 0.5, dtype=np.float32))
        stub, sess = raw_session(ps, "k.raw")
        before = fetch_model(stub, sess)
        assert before[0] == 2

        ps.kill()
        ps.start()

        with ps.admin() as admin:
            assert admin.status()["version"] == 2
        code, details = rpc_code(lambda: stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(sess), timeout=10,
                                                           wait_for_ready=True))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "re-join" in details
        stub2, sess2 = raw_session(ps, "k.raw2")
        assert fetch_model(stub2, sess2) == before  # byte-for-byte the checkpointed model
        # The old client rejoins by itself with its rejoin token (persisted hashed in the PS checkpoint).
        receipt = push(master, 2, np.full(NUMEL, 0.25, dtype=np.float32))
        assert receipt.version == 3
        master.close()
    finally:
        ps.kill()


# The kernel may hand a pod's SIGTERM to any of the PS's threads (mostly gRPC's); Python handles it only in the
# main thread, which must not sleep through it.
@pytest.mark.parametrize("taken_by", ["the process", "a thread other than main"])
def test_sigterm_writes_final_checkpoint(tmp_path, taken_by):
    ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "async", "buffer_size": 1}},
                extra=["--checkpoint-every", "1000"]).start()
    try:
        master = join(ps, "t.master", master=True)
        init_model(master)
        push(master, 1, np.full(NUMEL, 0.5, dtype=np.float32))
        master.close()
        if taken_by == "a thread other than main":
            signal_a_thread_other_than_main(ps.pid, signal.SIGTERM)
        else:
            ps.proc.send_signal(signal.SIGTERM)
        assert_exits_with(ps.proc, 0, 30, ps.log)
        assert "event=signal signal=SIGTERM" in ps.logs() and "event=checkpoint version=2" in ps.logs()
        ps.start()
        with ps.admin() as admin:
            assert admin.status()["version"] == 2
    finally:
        ps.kill()


def test_site_credentials_survive_restart_before_any_model(tmp_path):
    ps = PSNode(tmp_path / "ps").start()
    try:
        with ps.admin() as admin:
            site_credential = admin.create_site_credential("early")
        ps.kill()
        ps.start()
        from geofed.protocol.admin_client import AdminClient

        with AdminClient(ps.address, site_credential, insecure=True) as site:
            token, _ = site.create_token("early.gpu0")
        assert token
    finally:
        ps.kill()
