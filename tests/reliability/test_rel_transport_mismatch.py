"""A TLS client against a plaintext PS, and a plaintext (--insecure) one against a TLS PS: `geofed status`,
`geofed token create` and `geofed client` stop at once with one line naming the mismatch and the flag that
fixes it, instead of retrying handshakes until their deadline; the client's token stays unspent."""

from __future__ import annotations

import subprocess
import time

import grpc
import pytest
from rel_tls import CertAuthority

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.transport_probe import transport_mismatch
from geofed_apps.launch import GEOFED, child_env, free_port, write_token
from geofed_testing.procs import PSNode, TlsFiles
from geofed_testing.wire import mint

TLS_PS_HINT = ("serves TLS and this client dialled it in plaintext (--insecure): drop --insecure and pass --ca with "
               "the PEM CA of the PS certificate (not needed for a certificate from a public CA)")
PLAIN_PS_HINT = ("serves plaintext (it runs with --insecure) and this client dialled it with TLS: pass --insecure as "
                 "well (local use only), or run the PS with --tls-cert and --tls-key")


@pytest.fixture(scope="module")
def federations(tmp_path_factory):
    """A plaintext PS and a TLS PS, and the CA a client of the TLS one trusts."""
    tmp = tmp_path_factory.mktemp("mismatch")
    ca = CertAuthority(tmp / "pki")
    server = ca.issue("ps.geofed.test", server=True)
    plain = PSNode(tmp / "plain").start()
    tls = PSNode(tmp / "tls", tls=TlsFiles(server.cert, server.key, ca.files.cert))
    try:
        tls.start()
        yield plain, tls, ca.files.cert
    finally:
        plain.kill()
        tls.kill()


def _mismatched(federations, tls_client: bool):
    """The PS a client with these transport flags does not match, the flags, and the line it must print."""
    plain, tls, ca = federations
    if tls_client:
        return plain, ["--ca", str(ca)], f"the PS at {plain.address} {PLAIN_PS_HINT}"
    return tls, ["--insecure"], f"the PS at {tls.address} {TLS_PS_HINT}"


def _run(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env())
    return out, time.monotonic() - t0


@pytest.mark.parametrize("tls_client", [True, False], ids=["tls-client-plaintext-ps", "plaintext-client-tls-ps"])
@pytest.mark.parametrize("command", [["status"], ["token", "create", "--client-id", "uni.gpu0"]],
                         ids=["status", "token-create"])
def test_admin_commands_name_the_mismatch_and_its_fix(federations, tls_client, command):
    ps, transport, line = _mismatched(federations, tls_client)
    out, took = _run([*GEOFED, *command, "--ps", ps.address, "--admin-token-file", str(ps.admin_file), *transport])

    assert out.returncode == 1, out.stderr
    name = "token create" if command[0] == "token" else "status"
    assert out.stderr.splitlines() == [f"geofed {name}: UNAVAILABLE: {line}"], out.stderr
    assert took < 8.0  # the admin client's own deadline is 10 s: the mismatch is found before it


@pytest.mark.parametrize("tls_client", [True, False], ids=["tls-client-plaintext-ps", "plaintext-client-tls-ps"])
def test_a_client_names_the_mismatch_and_keeps_its_token(federations, tmp_path, tls_client):
    ps, transport, line = _mismatched(federations, tls_client)
    client_id = f"uni.gpu{int(tls_client)}"
    token = mint(ps, client_id)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("federated learning across sites " * 200)
    out, _ = _run([*GEOFED, "client", "--ps", ps.address, "--client-id", client_id, "--token-file",
                   str(write_token(tmp_path / "token", token)), "--data", str(tmp_path / "data"), "--work-dir",
                   str(tmp_path / "work"), "--join-timeout-s", "40", *transport])

    assert out.returncode == 3, out.stderr[-3000:]
    assert line in out.stderr, out.stderr[-3000:]
    assert out.stderr.count("Handshake failed") <= 2, out.stderr[-3000:]  # not one per retry until the deadline
    # The token was never spent: a client with the right transport joins with it.
    plain, tls, ca = federations
    channel = (grpc.secure_channel(ps.address, grpc.ssl_channel_credentials(ca.read_bytes())) if ps is tls
               else grpc.insecure_channel(ps.address))
    with channel:
        joined = pb_grpc.ParameterServerStub(channel).Join(pb.JoinRequest(token=token, client_id=client_id),
                                                           timeout=30)
    assert joined.session


def test_the_probe_finds_nothing_where_the_transports_match_or_nothing_listens(federations):
    plain, tls, _ = federations
    assert transport_mismatch(plain.address, insecure=True) is None
    assert transport_mismatch(tls.address, insecure=False) is None
    assert transport_mismatch(f"127.0.0.1:{free_port()}", insecure=False) is None  # refused: gRPC says it better
