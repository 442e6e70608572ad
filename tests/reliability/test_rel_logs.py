"""What a caller without valid credentials can make a real `geofed ps` write or expose.

- Every log line is one event: a newline (or any control character) in a value the caller chose (an upload id,
  a client id in a refused Join) is written as an escape, so it cannot forge a line.
- Refused credentials are each counted in `geofed_auth_failures`, but logged at a bounded rate: the first of
  each RPC at once, then at most one line per 10 s with the count held back.
- The metrics endpoint (unauthenticated: it names clients, losses and byte counts) binds 127.0.0.1 even when
  the gRPC port binds every interface.
"""

from __future__ import annotations

import psutil

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed_testing.ledger import delta_for
from geofed_testing.procs import PSNode
from geofed_testing.wire import NUMEL, delta_messages, encoded, init_model, join, raw_push, raw_session, rpc_code
from tests.reliability.test_rel_sybil import counter

FORGED = "\nts=2026-01-01 level=ERROR logger=geofed.ps event=forged"
REFUSALS = 300


def log_lines(ps: PSNode) -> list[str]:
    return [line for line in ps.logs().splitlines() if line.strip()]


def test_refused_credentials_are_all_counted_and_logged_at_a_bounded_rate_on_lines_of_their_own(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps", {}, metrics=True, extra=["--host", "0.0.0.0"])
    reaper.add(ps.kill)
    ps.start()
    stub = pb_grpc.ParameterServerStub(ps.channel())
    for i in range(REFUSALS):
        rpc_code(lambda i=i: stub.Join(pb.JoinRequest(token=f"guess{i}", client_id=f"x{FORGED}"), timeout=10))
        rpc_code(lambda i=i: stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(f"nope{i}"), timeout=10))

    assert counter(ps, "geofed_auth_failures", "rpc", "Join") == REFUSALS
    assert counter(ps, "geofed_auth_failures", "rpc", "Heartbeat") == REFUSALS
    lines = log_lines(ps)
    assert all(line.startswith("ts=") for line in lines), [line for line in lines if not line.startswith("ts=")]
    assert not any(line.split()[2] == "level=ERROR" for line in lines)  # the forged level stays inside its value
    assert 1 <= sum("event=join_refused" in line for line in lines) <= 3
    assert 1 <= sum("event=auth_refused rpc=Heartbeat" in line for line in lines) <= 3


def test_a_newline_in_an_upload_id_cannot_forge_a_log_line(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps", {})
    reaper.add(ps.kill)
    ps.start()
    init_model(join(ps, "boot.master", master=True, start=False, reaper=reaper))
    stub, session = raw_session(ps, "clinic.trainer")
    header, payload = encoded(delta_for("clinic/0", NUMEL))

    result = raw_push(stub, session, delta_messages(header, payload, base=1, upload_id=f"u1{FORGED}"))

    assert result.status == pb.APPLIED
    lines = log_lines(ps)
    assert all(line.startswith("ts=") for line in lines), [line for line in lines if not line.startswith("ts=")]
    assert any("event=push " in line and "\\nts=2026-01-01 level=ERROR" in line for line in lines)


def test_the_metrics_endpoint_binds_loopback_when_the_grpc_port_binds_every_interface(tmp_path, reaper):
    ps = PSNode(tmp_path / "ps", {}, metrics=True, extra=["--host", "0.0.0.0"])
    reaper.add(ps.kill)
    ps.start()

    listening = {
        c.laddr.port: c.laddr.ip
        for c in psutil.Process(ps.pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }

    assert listening[ps.metrics_port] == "127.0.0.1"
    assert listening[ps.port] in ("0.0.0.0", "::")
