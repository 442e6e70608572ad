"""Issue 10, item 6, against real PS processes: admin and push rate limits, per-client revocation, no raw secret
in `registry.json`, checkpoints or logs, and the Kubernetes exec probe (`ps_server/probe.py`)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
import urllib.request

import grpc
import numpy as np
import pytest
from rel_tls import CertAuthority

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.admin_client import AdminClient, AdminError
from geofed.protocol.auth import admin as admin_md
from geofed.protocol.auth import bearer
from geofed_apps.launch import child_env
from geofed_testing.ledger import EXACT_ASYNC, account, delta_for
from geofed_testing.procs import PSNode, TlsFiles
from geofed_testing.wire import (
    NUMEL,
    Observer,
    delta_messages,
    encoded,
    init_model,
    join,
    mint,
    push,
    raw_push,
    rpc_code,
    theta0,
)


def _started(ps: PSNode, reaper) -> PSNode:
    reaper.add(ps.kill)
    return ps.start()


def _counter(ps: PSNode, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{ps.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    label = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}_total{{{label}}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_admin_calls_are_rate_limited_per_address(tmp_path, reaper):
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, rate_limit=5.0, metrics=True), reaper)
    stub = pb_grpc.AdminStub(ps.channel())
    good, bad = admin_md(ps.admin_credential), admin_md("guess-" + "x" * 20)

    def code(md) -> grpc.StatusCode:
        try:
            stub.GetStatus(pb.StatusRequest(), metadata=md, timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    codes = [code(bad) for _ in range(30)] + [code(good) for _ in range(5)]

    # burst 10, 5/s: guessing stops being answered at all, and the admin waits its turn too
    assert codes[:10] == [grpc.StatusCode.UNAUTHENTICATED] * 10
    assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 15
    assert _counter(ps, "geofed_rate_limited", rpc="admin") == codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
    time.sleep(1.0)
    assert stub.GetStatus(pb.StatusRequest(), metadata=good, timeout=5).version == 0  # refilled


def test_pushes_over_the_rate_limit_are_refused_counted_and_change_nothing(tmp_path, reaper):
    exact = {**EXACT_ASYNC, "downlink": {"encoding": "fp32"}}  # the published model is θ0 + Σ applied δ exactly
    ps = _started(PSNode(tmp_path / "ps", exact, rate_limit=4.0, metrics=True), reaper)
    master = join(ps, "rl.master", master=True, start=False, reaper=reaper)
    init_model(master, theta0(NUMEL))
    stub = pb_grpc.ParameterServerStub(ps.channel())
    session = stub.Join(pb.JoinRequest(token=mint(ps, "rl.raw"), client_id="rl.raw"), timeout=10).session
    version, applied, refused = 1, [], 0

    for i in range(20):  # as fast as the wire allows: burst 8, then 4 per second
        tag = f"rl/{i}"
        code, details = grpc.StatusCode.OK, ""
        try:
            result = raw_push(stub, session, delta_messages(*encoded(delta_for(tag, NUMEL)), base=version,
                                                            upload_id=tag))
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
        if code == grpc.StatusCode.OK:
            assert result.status == pb.APPLIED
            version = result.version
            applied.append(tag)
        else:
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "rate limit" in details
            refused += 1

    assert refused >= 6 and applied
    assert _counter(ps, "geofed_rejected_pushes", reason="rate_limit") == refused
    time.sleep(2.0)  # the observer's Join has its own (per address) limit
    got_version, model = Observer(ps).model()
    acc = account(model, theta0(NUMEL), {f"rl/{i}": delta_for(f"rl/{i}", NUMEL) for i in range(20)})
    assert got_version == 1 + len(applied) and acc.applied == set(applied) and acc.residual < 1e-4


def test_revoking_a_client_ends_its_tokens_and_sessions_and_survives_a_restart(tmp_path, reaper):
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC), reaper)
    with ps.admin() as admin:
        site = admin.create_site_credential("uni")
    site_admin = AdminClient(ps.address, site, insecure=True)
    reaper.add(site_admin.close)
    stub = pb_grpc.ParameterServerStub(ps.channel())
    spare, single, other = mint(ps, "uni.c0"), mint(ps, "uni.c0"), mint(ps, "uni.c1")
    joined = stub.Join(pb.JoinRequest(token=mint(ps, "uni.c0"), client_id="uni.c0"), timeout=10)
    stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(joined.session), timeout=10)

    assert site_admin.revoke_client("uni.c0", single) == (1, 0)  # one token
    assert site_admin.revoke_client("uni.c0", single) == (0, 0)  # gone already
    assert site_admin.revoke_client("uni.c0") == (2, 1)  # the spare and the rejoin token; the session
    with pytest.raises(AdminError, match="PERMISSION_DENIED"):
        site_admin.revoke_client("other.c0")

    def join_code(token: str, client: str = "uni.c0") -> grpc.StatusCode:
        return rpc_code(lambda: stub.Join(pb.JoinRequest(token=token, client_id=client), timeout=10))[0]

    assert rpc_code(lambda: stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(joined.session), timeout=10))[0] \
        == grpc.StatusCode.UNAUTHENTICATED
    ps.kill()  # revocations are durable: registry.json is written on every credential change
    ps.start()
    for token in (spare, single, joined.rejoin_token):
        assert join_code(token) == grpc.StatusCode.UNAUTHENTICATED
    assert stub.Join(pb.JoinRequest(token=other, client_id="uni.c1"), timeout=10).session  # untouched


def test_no_raw_secret_reaches_registry_checkpoints_or_logs(tmp_path, reaper):
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, extra=["--log-level", "DEBUG"]), reaper)
    secrets = {"admin credential": ps.admin_credential}
    with ps.admin() as admin:
        secrets["site credential"] = admin.create_site_credential("uni")
    master = join(ps, "uni.master", master=True, start=False, reaper=reaper, state_dir=tmp_path / "m")
    init_model(master, theta0(NUMEL))
    client = join(ps, "uni.c0", start=False, reaper=reaper, state_dir=tmp_path / "c")
    push(client, 1, delta_for("secret/0", NUMEL))
    stub = pb_grpc.ParameterServerStub(ps.channel())
    joined = stub.Join(pb.JoinRequest(token=mint(ps, "uni.raw"), client_id="uni.raw"), timeout=10)
    secrets.update({"unused token": mint(ps, "uni.c1"), "master session": master.session,
                    "client session": client.session, "raw session": joined.session,
                    "raw rejoin token": joined.rejoin_token,
                    "client rejoin token": (tmp_path / "c" / "rejoin.token").read_text().strip()})
    assert ps.terminate() == 0  # graceful stop: the final checkpoint and registry are written

    files = {p.name: p.read_bytes() for p in ps.ckpt_dir.iterdir() if p.is_file()}
    files["ps.log"] = ps.logs().encode()
    assert "registry.json" in files and any(name != "registry.json" and name != "ps.log" for name in files)
    leaked = {(what, name) for what, value in secrets.items() for name, data in files.items()
              if value.encode() in data}
    assert not leaked, f"raw secrets on disk: {sorted(leaked)}"
    # the registry does hold what it needs: the tokens' hashes
    assert hashlib.sha256(secrets["unused token"].encode()).hexdigest().encode() in files["registry.json"]


@pytest.mark.parametrize("transport", ["plaintext", "tls"])
def test_probe_reports_a_serving_ps_and_fails_once_it_is_gone(tmp_path, reaper, transport):
    if transport == "tls":
        ca = CertAuthority(tmp_path / "pki")
        server = ca.issue("ps.geofed.test", server=True)
        ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC, tls=TlsFiles(server.cert, server.key, ca.files.cert)),
                      reaper)
        flags = ["--ca", str(ca.files.cert), "--server-name", "localhost"]
    else:
        ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC), reaper)
        flags = ["--insecure"]

    def probe() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ps_server.probe", "--port", str(ps.port), "--timeout", "5",
                               *flags], capture_output=True, text=True, timeout=60, env=child_env())

    up = probe()
    ps.kill()
    down = probe()

    assert (up.returncode, up.stdout.strip()) == (0, "serving"), up.stderr
    assert down.returncode == 1 and "unhealthy: UNAVAILABLE" in down.stderr, (down.stdout, down.stderr)


def test_model_is_unchanged_by_a_revoked_clients_push(tmp_path, reaper):
    ps = _started(PSNode(tmp_path / "ps", EXACT_ASYNC), reaper)
    master = join(ps, "rv.master", master=True, start=False, reaper=reaper)
    init_model(master, theta0(NUMEL))
    stub = pb_grpc.ParameterServerStub(ps.channel())
    session = stub.Join(pb.JoinRequest(token=mint(ps, "rv.c0"), client_id="rv.c0"), timeout=10).session
    before = Observer(ps).model()
    with ps.admin() as admin:
        admin.revoke_client("rv.c0")

    code, _ = rpc_code(lambda: raw_push(stub, session, delta_messages(*encoded(np.full(NUMEL, 0.01, np.float32)))))

    after = Observer(ps).model()
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert after[0] == before[0] and after[1].tobytes() == before[1].tobytes()
