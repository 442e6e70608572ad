"""Security defaults (issue 5, item 4): TLS by default, mTLS, no secrets in logs, 0600 secrets,
per-client rate limits and upload size caps — each against a real PS process."""

from __future__ import annotations

import logging
import stat
import subprocess

import grpc
import numpy as np
import pytest
from rel_tls import CertAuthority

from client_agent.connection.ps_client import JoinError
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import bearer
from geofed_apps.launch import GEOFED, child_env
from geofed_testing.ledger import EXACT_ASYNC, delta_for
from geofed_testing.procs import PSNode, TlsFiles
from geofed_testing.wire import Observer, delta_messages, encoded, init_model, join, mint, push, theta0

NUMEL = 3000


def _code(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _started(ps: PSNode, reaper) -> PSNode:
    reaper.add(ps.kill)
    return ps.start()


def test_ps_refuses_to_start_without_tls_unless_told_insecure(tmp_path):
    cmd = [*GEOFED, "ps", "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0", "--status-port", "0",
           "--admin-token-file", str(tmp_path / "admin.token"), "--checkpoint-dir", str(tmp_path / "ckpt")]

    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=child_env())

    assert r.returncode == 2
    assert "TLS needs --tls-cert and --tls-key" in r.stderr and "--insecure" in r.stderr, r.stderr


@pytest.fixture
def pki(tmp_path):
    ca = CertAuthority(tmp_path / "pki")
    return ca, ca.issue("ps.geofed.test", server=True)


def test_tls_client_works_and_plaintext_or_untrusted_clients_fail(tmp_path, reaper, pki):
    ca, server = pki
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, tls=TlsFiles(server.cert, server.key, ca.files.cert)), reaper)

    master = join(ps, "tls.master", master=True, start=False, reaper=reaper)
    assert init_model(master, theta0(NUMEL)).version == 1  # TLS end to end: admin, Join, PushDelta

    plain = pb_grpc.ParameterServerStub(grpc.insecure_channel(ps.address))
    assert _code(lambda: plain.Join(pb.JoinRequest(token="x", client_id="y"), timeout=5)) == grpc.StatusCode.UNAVAILABLE
    stranger = CertAuthority(tmp_path / "other-pki", "other-ca")
    untrusting = pb_grpc.ParameterServerStub(grpc.secure_channel(
        ps.address, grpc.ssl_channel_credentials(stranger.files.cert.read_bytes())))
    assert _code(lambda: untrusting.Join(pb.JoinRequest(token="x", client_id="y"), timeout=5)) == \
        grpc.StatusCode.UNAVAILABLE


def test_mtls_refuses_clients_without_a_certificate_from_its_ca(tmp_path, reaper, pki):
    ca, server = pki
    operator = ca.issue("operator", server=False)
    tls = TlsFiles(server.cert, server.key, ca.files.cert, client_ca=ca.files.cert, admin_cert=operator.cert,
                   admin_key=operator.key)
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, tls=tls), reaper)
    site = ca.issue("site.gpu0", server=False)
    foreign = CertAuthority(tmp_path / "other-pki", "other-ca").issue("site.gpu1", server=False)

    good = join(ps, "mtls.master", master=True, start=False, reaper=reaper,
                client_cert=site.cert.read_bytes(), client_key=site.key.read_bytes())
    assert init_model(good, theta0(NUMEL)).version == 1

    for name, cert in (("no certificate", None), ("certificate from another CA", foreign)):
        kw = {"client_cert": cert.cert.read_bytes(), "client_key": cert.key.read_bytes()} if cert else {}
        with pytest.raises(JoinError, match="UNAVAILABLE"):
            join(ps, f"mtls.{name[:2]}", start=False, reaper=reaper, join_deadline_s=1, **kw)


def test_tokens_and_credentials_never_reach_the_logs(tmp_path, reaper, caplog):
    caplog.set_level(logging.DEBUG)
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, extra=["--log-level", "DEBUG"]), reaper)
    secrets = {"admin credential": ps.admin_credential}
    with ps.admin() as admin:
        site_cred = admin.create_site_credential("uni")
        secrets["site credential"] = site_cred
    master = join(ps, "uni.master", master=True, start=False, reaper=reaper, state_dir=tmp_path / "m")
    init_model(master, theta0(NUMEL))
    client = join(ps, "uni.c0", start=True, reaper=reaper, state_dir=tmp_path / "c")
    push(client, 1, delta_for("log/0", NUMEL))
    stub = pb_grpc.ParameterServerStub(ps.channel())
    forged = "forged-" + "A" * 36
    assert _code(lambda: stub.Join(pb.JoinRequest(token=forged, client_id="uni.c9"), timeout=5)) != \
        grpc.StatusCode.OK
    unused = mint(ps, "uni.c1")
    secrets.update({"master session": master.session, "client session": client.session, "forged token": forged,
                    "unused token": unused, "master rejoin token": (tmp_path / "m" / "rejoin.token").read_text(),
                    "client rejoin token": (tmp_path / "c" / "rejoin.token").read_text()})
    ps.kill()  # a crash and a restart: the client re-joins with its rejoin token, which must not be logged either
    ps.start()
    push(client, 2, delta_for("log/1", NUMEL))
    secrets["rejoin token after restart"] = (tmp_path / "c" / "rejoin.token").read_text()
    secrets["session after restart"] = client.session

    ps_log = ps.logs()
    client_log = "\n".join(r.getMessage() for r in caplog.records)
    assert "event=join" in ps_log and "event=push" in ps_log  # the logs are there, just without secrets
    leaked = {name for name, value in secrets.items() if value and (value in ps_log or value in client_log)}
    assert not leaked, f"secrets in the logs: {sorted(leaked)}"


def test_secret_files_are_owner_only(tmp_path, reaper):
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC), reaper)
    master = join(ps, "mode.master", master=True, start=False, reaper=reaper, state_dir=tmp_path / "client")
    init_model(master, theta0(NUMEL))

    def mode(path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(ps.admin_file) == 0o600
    assert mode(tmp_path / "client" / "rejoin.token") == 0o600
    assert mode(ps.ckpt_dir) == 0o700
    files = list(ps.ckpt_dir.iterdir())
    assert files and all(mode(f) == 0o600 for f in files), {f.name: oct(mode(f)) for f in files}


def test_per_client_rate_limit_answers_resource_exhausted(tmp_path, reaper):
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, rate_limit=5.0), reaper)
    stub = pb_grpc.ParameterServerStub(ps.channel())
    sessions = [stub.Join(pb.JoinRequest(token=mint(ps, f"rl.c{i}"), client_id=f"rl.c{i}"), timeout=10).session
                for i in range(2)]

    codes = [_code(lambda: stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(sessions[0]), timeout=5))
             for _ in range(40)]

    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 25, codes
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert _code(lambda: stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(sessions[1]), timeout=5)) == \
        grpc.StatusCode.OK  # the flood of one client does not starve another
    joins = [_code(lambda: stub.Join(pb.JoinRequest(token="bogus", client_id="rl.x"), timeout=5)) for _ in range(20)]
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in joins  # token guessing is throttled per address


def test_upload_size_caps_hold_and_leave_the_model_untouched(tmp_path, reaper):
    cap = 20_000
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, extra=["--max-upload-bytes", str(cap)]), reaper)
    master = join(ps, "cap.master", master=True, start=False, reaper=reaper)
    init_model(master, theta0(NUMEL))
    stub = pb_grpc.ParameterServerStub(ps.channel())
    session = stub.Join(pb.JoinRequest(token=mint(ps, "cap.raw"), client_id="cap.raw"), timeout=10).session
    before = Observer(ps).model()
    header, payload = encoded(np.full(NUMEL, 0.01, np.float32))
    big = pb.DeltaChunk(payload=pb.DeltaPayload(offset=0, data=b"\0" * (9 << 20)))

    def raw(msgs):
        return lambda: stub.PushDelta(iter(msgs), metadata=bearer(session), timeout=30)

    assert _code(raw(delta_messages(header, payload, declared=cap + 1))) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _code(raw(delta_messages(header, payload + b"\0" * cap, declared=len(payload)))) == \
        grpc.StatusCode.INVALID_ARGUMENT  # a header that lies about the size is cut off at the declared size
    assert _code(raw([delta_messages(header, payload)[0], big])) == grpc.StatusCode.RESOURCE_EXHAUSTED  # 9 MiB

    after = Observer(ps).model()
    assert after[0] == before[0] and np.array_equal(after[1], before[1])
    assert push(master, 1, delta_for("cap/ok", NUMEL)).status == "APPLIED"  # honest pushes still land
