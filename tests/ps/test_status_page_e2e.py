"""The status page of a real PS process (issue 15): who may read it, what it shows, what it refuses.

Two clients of two sites push over the real gRPC wire; the expected contribution figures are recomputed
here from the deltas the test sent (tokens × (1 + staleness)^-0.5 × L2 norm), independently of the PS.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol.auth import bearer
from geofed_testing.procs import PSNode, free_port
from geofed_testing.wire import NUMEL, init_model, join, push, raw_session

GEOFED = str(Path(sys.executable).with_name("geofed"))
ASYNC_K1 = {"aggregation": {"mode": "async", "buffer_size": 1, "staleness_exponent": 0.5}}


def _get(url: str, *, auth: str | None = None, host: str | None = None, method: str = "GET"):
    """(status, headers, body) without raising on 4xx."""
    req = urllib.request.Request(url, method=method)
    if auth:
        req.add_header("Authorization", auth)
    if host:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _basic(credential: str) -> str:
    return "Basic " + base64.b64encode(f"anyone:{credential}".encode()).decode()


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """A PS whose page needs a credential, two sites, three applied deltas; yields what the test knows."""
    ps = PSNode(tmp_path_factory.mktemp("status") / "ps", ASYNC_K1, metrics=True,
                extra=["--status-auth", "credential"])
    ps.status_port = free_port()
    ps.start()
    clients = []
    try:
        with ps.admin() as admin:
            west_credential = admin.create_site_credential("west")
        east = join(ps, "east.m", site="east", master=True)
        west = join(ps, "west.a", site="west")
        clients = [east, west]
        init_model(east)  # v1
        rng = np.random.default_rng(7)
        d_east, d_west = (rng.standard_normal(NUMEL) * 0.004).astype(np.float32), \
            (rng.standard_normal(NUMEL) * 0.002).astype(np.float32)
        east.report = {"train_loss": 3.5, "eval_loss": 3.6, "tokens_per_s": 50.0}
        assert push(east, 1, d_east, tokens=100).status == "APPLIED"  # v2, staleness 0
        west.report = {"train_loss": 3.0, "eval_loss": 3.1, "tokens_per_s": 1e9}
        assert push(west, 1, d_west, tokens=300).status == "APPLIED"  # v3, staleness 1
        norm = lambda d: float(np.linalg.norm(d.astype(np.float64)))  # noqa: E731
        expected = {"east.m": (100, 100 * norm(d_east)), "west.a": (300, 300 * 2**-0.5 * norm(d_west))}
        yield ps, west_credential, expected
    finally:
        for c in clients:
            c.close()
        ps.kill()


def test_no_credential_is_401_and_a_wrong_one_403_revealing_nothing(federation):
    ps, _, _ = federation
    for path in ("/", "/api/status", "/static/status.js", "/nowhere"):
        status, headers, body = _get(f"http://127.0.0.1:{ps.status_port}{path}")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert b"east" not in body and b"west" not in body and b"loss" not in body
    status, _, body = _get(f"http://127.0.0.1:{ps.status_port}/api/status", auth=_basic("site-" + "x" * 43))
    assert status == 403 and b"east" not in body and b"west" not in body
    status, _, _ = _get(f"http://127.0.0.1:{ps.status_port}/api/status", auth="Basic !!notbase64")
    assert status == 400


def test_malformed_queries_are_400_and_other_methods_405(federation):
    ps, _, _ = federation
    admin = _basic(ps.admin_credential)
    for query in ("since=abc", "since=-1", "foo=1", "since=1&since=2", "site=a%20b", "since"):
        status, _, body = _get(f"http://127.0.0.1:{ps.status_port}/api/status?{query}", auth=admin)
        assert status == 400, query
        assert b"east" not in body and b"west" not in body
    assert _get(f"http://127.0.0.1:{ps.status_port}/?x=1", auth=admin)[0] == 400
    assert _get(f"http://127.0.0.1:{ps.status_port}/nowhere", auth=admin)[0] == 404
    assert _get(f"http://127.0.0.1:{ps.status_port}/api/status", auth=admin, method="POST")[0] == 405


def test_the_admin_sees_every_client_with_the_contribution_ledger(federation):
    # Execute
    ps, _, expected = federation
    status, headers, body = _get(f"http://127.0.0.1:{ps.status_port}/api/status", auth=_basic(ps.admin_credential))
    view = json.loads(body)

    # Assert
    assert status == 200 and headers["Content-Security-Policy"].startswith("default-src 'self'")
    rows = {c["client_id"]: c for c in view["clients"]}
    assert set(rows) == {"east.m", "west.a"} and view["server"]["version"] == 3
    total = sum(m for _, m in expected.values())
    for client_id, (tokens, mass) in expected.items():
        assert rows[client_id]["tokens"] == tokens
        assert rows[client_id]["mass"] == pytest.approx(mass, rel=1e-4)
        assert rows[client_id]["share_run"] == pytest.approx(mass / total, rel=1e-4)
        assert rows[client_id]["share_window"] == pytest.approx(mass / total, rel=1e-4)  # window 20 > 2 versions
    assert rows["west.a"]["staleness"] == 1 and rows["east.m"]["staleness"] == 0
    assert [(r["state"], r["rejoins"], r["pushes"]) for r in view["clients"]] == [("training", 0, 1)] * 2
    assert 0 < rows["east.m"]["compute_s"] <= 2.0  # 100 tokens at 50 tokens/s, capped by the time since its join
    assert 0 < rows["west.a"]["compute_s"] < 1e-3  # 300 tokens at the claimed 1e9 tokens/s
    assert rows["east.m"]["compression_ratio"] == pytest.approx(1.0, rel=0.05)  # fp32 codec
    assert {s["site"]: s["tokens"] for s in view["sites"]} == {"east": 100, "west": 300}
    assert [p[0] for p in view["history"]][-2:] == [2, 3] and view["history"][-1][3] == pytest.approx(3.35)


def test_a_site_sees_its_own_clients_only(federation):
    ps, west_credential, _ = federation
    url = f"http://127.0.0.1:{ps.status_port}/api/status"

    status, _, body = _get(url, auth=f"Bearer {west_credential}")
    view = json.loads(body)

    assert status == 200 and [c["client_id"] for c in view["clients"]] == ["west.a"]
    assert [s["site"] for s in view["sites"]] == ["west"] and b"east.m" not in body
    assert _get(url + "?site=east", auth=f"Bearer {west_credential}")[0] == 403
    assert _get(url + "?site=west", auth=f"Bearer {west_credential}")[0] == 200


def test_prometheus_and_geofed_status_carry_the_same_accounting(federation):
    ps, _, expected = federation
    assert ps.metric("geofed_site_tokens_trained") == 400
    assert ps.metric("geofed_client_update_share_run") == pytest.approx(1.0)

    admin = ["--ps", ps.address, "--admin-token-file", str(ps.admin_file), "--insecure"]
    table = subprocess.run([GEOFED, "status", *admin], capture_output=True, text=True, timeout=60)
    as_json = subprocess.run([GEOFED, "status", "--json", "--clients", *admin], capture_output=True, text=True,
                             timeout=60)

    assert table.returncode == 0, table.stderr
    west_row = next(line for line in table.stdout.splitlines() if line.startswith("west.a"))
    assert "300" in west_row and re.search(r"\bSHARE\(RUN\)", table.stdout)
    clients = {c["client_id"]: c for c in json.loads(as_json.stdout)["clients"]}
    assert clients["west.a"]["tokens_trained"] == 300
    assert clients["east.m"]["update_mass"] == pytest.approx(expected["east.m"][1], rel=1e-4)


def test_a_loopback_page_needs_no_credential_but_a_local_host_name(tmp_path):
    ps = PSNode(tmp_path / "ps")
    ps.status_port = free_port()
    ps.start()
    try:
        stub, session = raw_session(ps, "odd.reporter")  # a client reporting a NaN loss must not break the page
        stub.Heartbeat(pb.HeartbeatRequest(report=pb.ClientReport(train_loss=float("nan"), eval_loss=float("inf"))),
                       metadata=bearer(session), timeout=10)
        base = f"http://127.0.0.1:{ps.status_port}"
        status, _, body = _get(base + "/api/status")
        assert status == 200
        row = json.loads(body)["clients"][0]
        assert row["client_id"] == "odd.reporter" and row["train_loss"] is None and row["eval_loss"] is None
        status, headers, body = _get(base + "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html") and b"/static/status.js" in body
        assert _get(base + "/api/status")[0] == 200
        assert _get(base + "/api/status", host=f"evil.example:{ps.status_port}")[0] == 400  # DNS rebinding
        assert _get(base + "/api/status", auth=_basic("wrong-" + "x" * 40))[0] == 403
    finally:
        ps.kill()


def test_geofed_status_watch_refreshes_until_interrupted(federation):
    # Prepare
    ps, _, _ = federation
    cmd = [GEOFED, "status", "--watch", "0.2", "--ps", ps.address, "--admin-token-file", str(ps.admin_file),
           "--insecure"]

    # Execute: read until the table was printed twice, then Ctrl-C
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    headers = 0
    try:
        for line in proc.stdout:
            headers += line.startswith("federation default  version 3")
            if headers == 2:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        # Drain stdout while it exits: a child blocked writing to a full pipe (refreshes every 0.2 s that this
        # test no longer reads) would never get to exit, and wait() alone would hang (seen once under CI load).
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hung: every thread's stack (geofed.logs.enable_stack_dumps)
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2.0)
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"geofed status --watch still running 60 s after Ctrl-C:\n{err[-12000:]}") from None
        code = proc.returncode

    # Assert
    assert headers == 2 and code == 0, err
