"""Every malformed push or credential gets a specific status, is counted, and leaves the model untouched."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import admin as admin_md
from geofed.protocol.auth import bearer
from geofed_testing.procs import PSNode
from geofed_testing.wire import (
    MANIFEST,
    NUMEL,
    delta_messages,
    encoded,
    fetch_model,
    init_model,
    join,
    mint,
    raw_push,
    raw_session,
    rpc_code,
    theta0,
)

CAP = 20_000  # bytes: the fp32 model (12.2 kB) fits, a declared 30 kB does not


@pytest.fixture(scope="module")
def ps(tmp_path_factory):
    proc = PSNode(tmp_path_factory.mktemp("bad"), {"aggregation": {"mode": "async", "buffer_size": 1}},
                  extra=["--max-upload-bytes", str(CAP)]).start()
    master = join(proc, "bad.master", master=True)
    init_model(master)
    master.close()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def session(ps):
    return raw_session(ps, "bad.client")


def _good(d=None):
    d = np.full(NUMEL, 0.01, dtype=np.float32) if d is None else d
    return encoded(d)


def _case(name):
    header, payload = _good()
    if name == "truncated_no_trailer":
        return delta_messages(header, payload, base=1)[:-2]
    if name == "truncated_then_trailer":
        msgs = delta_messages(header, payload, base=1)
        return msgs[:2] + msgs[-1:]
    if name == "reordered":
        msgs = delta_messages(header, payload, base=1)
        msgs[1], msgs[2] = msgs[2], msgs[1]
        return msgs
    if name == "more_than_declared":
        return delta_messages(header, payload, base=1, declared=len(payload) - 10)
    if name == "checksum":
        return delta_messages(header, payload, base=1, sha=b"\x00" * 32)
    if name == "unknown_codec":
        return delta_messages(b"garbage-codec-header", payload, base=1)
    if name in ("nan", "inf"):
        d = np.zeros(NUMEL, dtype=np.float32)
        d[123] = np.nan if name == "nan" else np.inf
        return delta_messages(*encoded(d), base=1)
    if name == "wrong_shape":
        return delta_messages(*encoded(np.zeros(NUMEL + 1, dtype=np.float32)), base=1)
    if name == "oversized":
        return delta_messages(header, payload, base=1, declared=30_000)
    if name == "payload_first":
        return delta_messages(header, payload, base=1)[1:]
    if name == "base_ahead":
        return delta_messages(header, payload, base=99)
    if name == "init_again_by_non_master":
        return delta_messages(*encoded(theta0()), base=0, init=True, manifest=MANIFEST)
    raise KeyError(name)


CASES = [
    ("truncated_no_trailer", grpc.StatusCode.INVALID_ARGUMENT, "ended before the trailer"),
    ("truncated_then_trailer", grpc.StatusCode.INVALID_ARGUMENT, "truncated"),
    ("reordered", grpc.StatusCode.INVALID_ARGUMENT, "expected offset"),
    ("more_than_declared", grpc.StatusCode.INVALID_ARGUMENT, "exceeds the declared"),
    ("checksum", grpc.StatusCode.DATA_LOSS, "checksum mismatch"),
    ("unknown_codec", grpc.StatusCode.INVALID_ARGUMENT, "codec header"),
    ("nan", grpc.StatusCode.INVALID_ARGUMENT, "non-finite value"),
    ("inf", grpc.StatusCode.INVALID_ARGUMENT, "non-finite value"),
    ("wrong_shape", grpc.StatusCode.INVALID_ARGUMENT, "elements but the federation exchanges"),
    ("oversized", grpc.StatusCode.RESOURCE_EXHAUSTED, "exceeds the cap"),
    ("payload_first", grpc.StatusCode.INVALID_ARGUMENT, "must be its header"),
    ("init_again_by_non_master", grpc.StatusCode.PERMISSION_DENIED, "only the master"),
]


@pytest.mark.parametrize(("name", "code", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_push_refused_and_model_untouched(ps, session, name, code, fragment):
    stub, sess = session
    before = fetch_model(stub, sess)

    got_code, details = rpc_code(lambda: raw_push(stub, sess, _case(name)))

    assert got_code == code, details
    assert fragment in details
    assert fetch_model(stub, sess) == before  # version and every byte of the global model unchanged


def test_delta_ahead_of_the_ps_is_answered_stale_and_model_untouched(ps, session):
    """A base version the PS does not have yet (it restarted behind the client) is a STALE outcome, not an error."""
    stub, sess = session
    before = fetch_model(stub, sess)

    result = raw_push(stub, sess, _case("base_ahead"))

    assert result.status == pb.STALE and "ahead of the global version" in result.message
    assert fetch_model(stub, sess) == before


def test_rejections_are_counted_by_reason(ps, session):
    stub, sess = session
    rpc_code(lambda: raw_push(stub, sess, _case("checksum")))
    logs = ps.logs()
    assert "event=push_rejected" in logs and "reason=checksum" in logs


def test_missing_session_is_unauthenticated(ps):
    stub = pb_grpc.ParameterServerStub(ps.channel())
    code, details = rpc_code(lambda: stub.Heartbeat(pb.HeartbeatRequest(), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "Join" in details


def test_replayed_token_refused(ps):
    stub = pb_grpc.ParameterServerStub(ps.channel())
    token = mint(ps, "bad.replay")
    stub.Join(pb.JoinRequest(token=token, client_id="bad.replay"), timeout=5)
    code, details = rpc_code(lambda: stub.Join(pb.JoinRequest(token=token, client_id="bad.replay"), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "already used" in details


def test_expired_token_refused(ps):
    stub = pb_grpc.ParameterServerStub(ps.channel())
    token = mint(ps, "bad.expired", ttl_s=0.5)
    time.sleep(0.8)
    code, details = rpc_code(lambda: stub.Join(pb.JoinRequest(token=token, client_id="bad.expired"), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "expired" in details


def test_foreign_token_refused_and_not_burned(ps):
    stub = pb_grpc.ParameterServerStub(ps.channel())
    token = mint(ps, "bad.owner")
    code, details = rpc_code(lambda: stub.Join(pb.JoinRequest(token=token, client_id="bad.thief"), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "another client" in details
    assert stub.Join(pb.JoinRequest(token=token, client_id="bad.owner"), timeout=5).session  # owner still gets in


def test_forged_token_refused(ps):
    stub = pb_grpc.ParameterServerStub(ps.channel())
    code, _ = rpc_code(lambda: stub.Join(pb.JoinRequest(token="forged" * 8, client_id="bad.x"), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_admin_call_with_client_session_refused(ps, session):
    _, sess = session
    admin = pb_grpc.AdminStub(ps.channel())
    for md in (bearer(sess), admin_md(sess)):
        code, _ = rpc_code(
            lambda md=md: admin.CreateToken(pb.CreateTokenRequest(client_id="x"), metadata=md, timeout=5)
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_site_credential_scoped_to_its_site(ps):
    with ps.admin() as admin:
        site_cred = admin.create_site_credential("uni")
    stub = pb_grpc.AdminStub(ps.channel())
    ok = stub.CreateToken(pb.CreateTokenRequest(client_id="uni.gpu0"), metadata=admin_md(site_cred), timeout=5)
    assert ok.token
    code, details = rpc_code(lambda: stub.CreateToken(pb.CreateTokenRequest(client_id="other.gpu0"),
                                                      metadata=admin_md(site_cred), timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "may not mint" in details
    with ps.admin() as admin:
        assert admin.revoke_site("uni")
    code, _ = rpc_code(lambda: stub.CreateToken(pb.CreateTokenRequest(client_id="uni.gpu1"),
                                                metadata=admin_md(site_cred), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    join = pb_grpc.ParameterServerStub(ps.channel())
    code, _ = rpc_code(lambda: join.Join(pb.JoinRequest(token=ok.token, client_id="uni.gpu0"), timeout=5))
    assert code == grpc.StatusCode.UNAUTHENTICATED  # tokens of a revoked site die with it
