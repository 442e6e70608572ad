"""Hostile input (issue 5, item 3): a hypothesis fuzzer over PushDelta and the credentials, plus replayed,
expired and forged tokens, hijacked sessions, admin calls with client credentials and log injection.

Throughout, an honest client keeps pushing; at the end its deltas, and only its deltas, are in the model.
"""

from __future__ import annotations

import os
import threading
import time

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rel_hostile import CAP, NUMEL, SPECIFIC, Case, hostile_pushes

from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.auth import admin as admin_md
from geofed.protocol.auth import bearer
from geofed_testing.ledger import EXACT_ASYNC, account, delta_for
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import Observer, init_model, join, mint, push, theta0

FUZZ = settings(max_examples=int(os.environ.get("GEOFED_FUZZ_EXAMPLES", "300")), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


class Honest:
    """A well-behaved client pushing distinct deltas in the background for the whole module."""

    def __init__(self, ps: PSNode, reaper: Reaper) -> None:
        self.client = join(ps, "honest.c0", reaper=reaper, start=False)
        self.tags: list[str] = []
        self.errors: list[str] = []
        self.stop, self.paused = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        base = 1
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.02)
                continue
            tag = f"honest/{len(self.tags)}"
            try:
                base = push(self.client, base, delta_for(tag, NUMEL)).version
            except Exception as exc:  # any failure of the honest client is a finding
                self.errors.append(f"{tag}: {type(exc).__name__}: {exc}")
                return
            self.tags.append(tag)
            time.sleep(0.02)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    with Reaper() as reaper:
        ps = PSNode(tmp_path_factory.mktemp("hostile") / "ps", EXACT_ASYNC, extra=["--max-upload-bytes", str(CAP)])
        reaper.add(ps.kill)
        ps.start()
        master = join(ps, "hostile.master", master=True, start=False, reaper=reaper)
        init_model(master, theta0(NUMEL))
        channel = ps.channel()
        reaper.add(channel.close)
        stub = pb_grpc.ParameterServerStub(channel)
        session = stub.Join(pb.JoinRequest(token=mint(ps, "fuzz.raw"), client_id="fuzz.raw"), timeout=10).session
        honest = Honest(ps, reaper)
        reaper.add(honest.stop.set)
        yield ps, stub, session, honest


def _code(call) -> tuple[grpc.StatusCode, str]:
    try:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, pb.PushResult):
            for _ in result:  # a stream: the refusal arrives with the first read
                break
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    if isinstance(result, pb.PushResult) and result.status == pb.STALE:
        # "Resync and retrain" is a push outcome, not an error status: the refusal a base from the future earns.
        return grpc.StatusCode.FAILED_PRECONDITION, result.message
    return grpc.StatusCode.OK, ""


@FUZZ
@given(case=hostile_pushes())
def test_fuzzed_pushes_are_refused_with_a_specific_status(hostile, case: Case):
    _, stub, session, _ = hostile
    event(case.name)

    code, details = _code(lambda: stub.PushDelta(iter(case.messages), metadata=bearer(session), timeout=30))

    expected = sorted(c.name for c in case.expect)
    assert code in case.expect, f"{case.name}: got {code.name} ({details!r}), expected {expected}"
    assert code in SPECIFIC and details, f"{case.name}: {code.name} {details!r}"


_printable = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=80)


@FUZZ
@given(scheme=st.sampled_from(["Bearer ", "Admin ", "bearer ", "Basic ", ""]), secret=_printable,
       rpc=st.sampled_from(["Heartbeat", "PushDelta", "StreamModel", "GetStatus", "CreateToken", "Join"]))
def test_fuzzed_credentials_are_refused(hostile, scheme: str, secret: str, rpc: str):
    ps, stub, _, _ = hostile
    md = (("authorization", f"{scheme}{secret}"),)
    admin = pb_grpc.AdminStub(ps.channel())
    calls = {
        "Heartbeat": lambda: stub.Heartbeat(pb.HeartbeatRequest(), metadata=md, timeout=10),
        "PushDelta": lambda: stub.PushDelta(iter([pb.DeltaChunk()]), metadata=md, timeout=10),
        "StreamModel": lambda: stub.StreamModel(pb.StreamModelRequest(), metadata=md, timeout=10),
        "GetStatus": lambda: admin.GetStatus(pb.StatusRequest(), metadata=md, timeout=10),
        "CreateToken": lambda: admin.CreateToken(pb.CreateTokenRequest(client_id="x.y"), metadata=md, timeout=10),
        "Join": lambda: stub.Join(pb.JoinRequest(token=secret, client_id=secret[:20]), timeout=10),
    }

    code, details = _code(calls[rpc])

    assert code == grpc.StatusCode.UNAUTHENTICATED, f"{rpc} with {md}: {code.name} {details!r}"


def _join(stub, token: str, client_id: str):
    return stub.Join(pb.JoinRequest(token=token, client_id=client_id), timeout=10)


def test_replayed_token_is_refused(hostile):
    ps, stub, _, _ = hostile
    token = mint(ps, "replay.c0")
    _join(stub, token, "replay.c0")

    code, details = _code(lambda: _join(stub, token, "replay.c0"))

    assert code == grpc.StatusCode.UNAUTHENTICATED and "already used" in details


def test_expired_token_is_refused(hostile):
    ps, stub, _, _ = hostile
    token = mint(ps, "expired.c0", ttl_s=0.3)
    time.sleep(0.5)

    code, details = _code(lambda: _join(stub, token, "expired.c0"))

    assert code == grpc.StatusCode.UNAUTHENTICATED and "expired" in details


def test_forged_and_foreign_tokens_are_refused(hostile):
    ps, stub, _, _ = hostile
    real = mint(ps, "owner.c0")
    forged = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")

    assert _code(lambda: _join(stub, forged, "owner.c0"))[0] == grpc.StatusCode.UNAUTHENTICATED
    assert _code(lambda: _join(stub, real, "thief.c0"))[0] == grpc.StatusCode.UNAUTHENTICATED
    assert _join(stub, real, "owner.c0").session  # neither attempt burned the owner's token


def test_admin_calls_with_a_client_credential_are_refused(hostile):
    ps, _, session, _ = hostile
    admin = pb_grpc.AdminStub(ps.channel())
    calls = [
        lambda md: admin.CreateToken(pb.CreateTokenRequest(client_id="fuzz.raw2", master=True), metadata=md,
                                     timeout=10),
        lambda md: admin.CreateSiteCredential(pb.SiteRequest(site="evil"), metadata=md, timeout=10),
        lambda md: admin.RevokeSite(pb.SiteRequest(site="fuzz"), metadata=md, timeout=10),
        lambda md: admin.ListClients(pb.ListClientsRequest(), metadata=md, timeout=10),
    ]
    for call in calls:
        for md in (bearer(session), admin_md(session)):
            assert _code(lambda call=call, md=md: call(md))[0] == grpc.StatusCode.UNAUTHENTICATED


def test_session_used_from_a_second_connection_is_refused(hostile):
    """A session credential is bound to the connection that joined; a copy replayed elsewhere is refused."""
    ps, _, _, _ = hostile
    first, second = ps.channel(own_connection=True), ps.channel(own_connection=True)
    owner = pb_grpc.ParameterServerStub(first)
    session = _join(owner, mint(ps, "hijack.c0"), "hijack.c0").session
    owner.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(session), timeout=10)

    code, details = _code(lambda: pb_grpc.ParameterServerStub(second).Heartbeat(
        pb.HeartbeatRequest(), metadata=bearer(session), timeout=10))

    assert code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED), (
        f"{code.name}: ps_server/registry.py sessions are bearer secrets not bound to the joining connection "
        "(context.peer() / TLS session); servicer._session accepts them from any connection"
    )


def test_hostile_resume_offsets_are_refused(hostile):
    ps, stub, session, honest = hostile
    honest.paused.set()
    try:
        time.sleep(0.3)
        version = ps.status()["version"]
        # A transfer is a byte stream of its encoding (fp32 here, 4·NUMEL bytes): any offset inside it resumes,
        # one at or past its end is refused.
        for offset in (4 * NUMEL, 4 * NUMEL + 4, 2**63):
            req = pb.StreamModelRequest(resume_version=version, resume_offset=offset)
            code, _ = _code(lambda req=req: stub.StreamModel(req, metadata=bearer(session), timeout=10))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (offset, code)
        for offset in (1, 400):
            ok = stub.StreamModel(pb.StreamModelRequest(resume_version=version, resume_offset=offset),
                                  metadata=bearer(session), timeout=10)
            first = next(iter(ok))
            ok.cancel()
            assert (first.version, first.offset) == (version, offset)
    finally:
        honest.paused.clear()


def test_client_supplied_strings_cannot_forge_log_lines(hostile):
    ps, stub, _, _ = hostile
    forged = "x\nts=1999-01-01 00:00:00,000 level=INFO logger=geofed.ps event=checkpoint version=999999"

    code, _ = _code(lambda: _join(stub, "no-such-token", forged))

    assert code == grpc.StatusCode.UNAUTHENTICATED
    time.sleep(0.3)
    injected = [line for line in ps.logs().splitlines() if line.startswith("ts=1999-01-01")]
    assert not injected, (
        "ps_server/grpc_api.py Join logs the caller's client_id with %s (event=join_refused client=...): a "
        f"newline in it forges a log line: {injected}"
    )


def test_honest_client_pushed_throughout_and_only_its_deltas_are_in_the_model(hostile):
    ps, _, _, honest = hostile
    deadline = time.monotonic() + 30
    while len(honest.tags) < 10 and not honest.errors and time.monotonic() < deadline:
        time.sleep(0.1)
    honest.stop.set()
    honest.thread.join(30)

    assert not honest.errors, honest.errors
    version, model = Observer(ps, "hostile.observer").model()
    acc = account(model, theta0(NUMEL), {t: delta_for(t, NUMEL) for t in honest.tags})
    assert acc.residual < 1e-4, f"something other than the honest deltas moved the model ({acc.residual:.2e})"
    assert acc.applied == set(honest.tags) and not acc.twice and not acc.stray
    assert version == 1 + len(honest.tags)
    print(f"\nhonest client: {len(honest.tags)} pushes applied while the fuzzer ran; model = θ0 + exactly those")
