"""No site can starve the others' RPCs: idle model streams from one valid session against a real `geofed ps`.

Each long-lived call (StreamModel, PushDelta) holds a handler thread of the PS. The caps (defaults: 4 per
session, 16 per site across its client ids, 384 in all, below the 512 handler threads) refuse the excess at once
with RESOURCE_EXHAUSTED naming the cap, so an honest site's Join, push and model fetch are served promptly.
"""

from __future__ import annotations

import time

import grpc
import pytest

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed_testing.ledger import delta_for
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import NUMEL, fetch_model, init_model, join, mint, push

IDLE_STREAMS = 600  # more than the PS's 512 handler threads
PROMPT_S = 5.0


def open_idle_streams(stub: pb_grpc.ParameterServerStub, session: str, version: int, n: int) -> list:
    """`n` StreamModel calls that hold the current version: the PS has nothing to send them until a new one."""
    request = pb.StreamModelRequest(have_version=version)
    return [stub.StreamModel(request, metadata=bearer(session), timeout=120) for _ in range(n)]


def settle(calls: list, wait_s: float = 5.0) -> tuple[list, list]:
    """(refused, still open) after the refusals have had `wait_s` to arrive."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.25)
    refused = [c for c in calls if c.done()]
    return refused, [c for c in calls if not c.done()]


@pytest.fixture
def ps(tmp_path, reaper: Reaper) -> PSNode:
    node = PSNode(tmp_path / "ps", {}, metrics=True)
    reaper.add(node.kill)
    node.start()
    return node


def test_hundreds_of_idle_streams_from_one_session_leave_honest_joins_and_pushes_served(ps, reaper):
    master = join(ps, "boot.master", master=True, start=False, reaper=reaper)
    init_model(master)
    version = 1
    channel = ps.channel()  # the session is bound to the connection that joined
    reaper.add(channel.close)
    stub = pb_grpc.ParameterServerStub(channel)
    token = mint(ps, "evil.a", site="evil")
    session = stub.Join(pb.JoinRequest(token=token, client_id="evil.a"), timeout=10).session
    calls = open_idle_streams(stub, session, version, IDLE_STREAMS)
    reaper.add(lambda: [c.cancel() for c in calls])

    refused, still_open = settle(calls)

    t0 = time.monotonic()
    honest = join(ps, "clinic.trainer", site="clinic", start=False, reaper=reaper)
    receipt = push(honest, version, delta_for("clinic/0", NUMEL), tokens=100)
    honest_stub = pb_grpc.ParameterServerStub(ps.channel())
    honest_session = honest_stub.Join(
        pb.JoinRequest(token=mint(ps, "clinic.reader", site="clinic"), client_id="clinic.reader"), timeout=10
    ).session
    got_version, _ = fetch_model(honest_stub, honest_session, timeout=10)
    served_s = time.monotonic() - t0

    assert receipt.status in ("ACCEPTED", "APPLIED") and got_version == 2
    assert served_s < PROMPT_S, f"the honest site waited {served_s:.1f} s"
    assert len(still_open) == 4, f"{len(still_open)} idle streams of one session stayed open"
    assert {c.code() for c in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert all("max_streams_per_session" in c.details() for c in refused)
    assert ps.metric("geofed_refused_calls_total") == IDLE_STREAMS - 4


def test_a_sites_client_ids_share_its_stream_cap(ps, reaper):
    master = join(ps, "boot.master", master=True, start=False, reaper=reaper)
    init_model(master)
    calls = []
    for i in range(5):  # 5 sessions of one site, each within its own cap of 4: 20 streams, the site may hold 16
        channel = ps.channel(own_connection=True)
        reaper.add(channel.close)
        stub = pb_grpc.ParameterServerStub(channel)
        client_id = f"evil.s{i % 4}"
        session = stub.Join(pb.JoinRequest(token=mint(ps, client_id, site="evil"), client_id=client_id), timeout=10)
        calls += open_idle_streams(stub, session.session, 1, 4)
    reaper.add(lambda: [c.cancel() for c in calls])

    refused, still_open = settle(calls)

    assert len(still_open) == 16 and len(refused) == 4
    assert all(
        c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_streams_per_site" in c.details() for c in refused
    )
