"""Multi-PS groups end to end: real PS processes combining rounds by ring all-reduce over gRPC.

Each group has one numpy client (the real `PSClient` over the real wire). PS-to-PS links go through the
WAN emulator so a ring takes long enough for a PS to be SIGKILLed in the middle of one.
"""

from __future__ import annotations

import re
import threading
import time

import grpc
import numpy as np
import pytest

from client_agent.connection.ps_client import JoinSpec, PSClient
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed_apps.groups import PSGroupProcesses
from geofed_apps.launch import wait_until
from geofed_apps.wan import LinkProfile, WanProxy
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import MANIFEST, NUMEL, Observer, init_model, mint, push, rpc_code, theta0
from ps_server.global_model import TensorEntry
from ps_server.peers import layout_digest

# Nesterov: each PS keeps outer momentum, so bit-identical models after a rejoin also prove that the rejoining
# PS took the others' optimizer state along with their model.
FEDERATION = {
    "name": "groups-test",
    "aggregation": {"mode": "async", "buffer_size": 1, "outer_optimizer": "nesterov", "global_lr": 0.7,
                    "max_staleness": 50, "norm_bound_multiple": 0},
    "ring": {"timeout_s": 4.0, "retries": 2, "codec": "int16"},
    # The groups' models are compared bit for bit through the model stream: stream the exact vector (the
    # compressed stream publishes each PS's own grid rounding of it, which depends on that PS's history).
    "downlink": {"encoding": "fp32"},
}


@pytest.fixture
def reaper():
    with Reaper() as r:
        yield r


def start_groups(tmp_path, reaper, n, latency_ms=0.0):
    groups = PSGroupProcesses(tmp_path, FEDERATION, n, ps_class=PSNode)
    if latency_ms:
        proxies = {}
        for g, port in groups.ports.items():
            proxy = WanProxy("127.0.0.1", port, LinkProfile(latency_ms=latency_ms, seed=1))
            proxies[g] = f"127.0.0.1:{proxy.start()}"
            reaper.add(proxy.stop)
        groups.route(proxies)
    for ps in groups:
        reaper.add(ps.kill)
    groups.start()
    return groups


def join(ps, client_id, *, reaper, group="", master=False):
    """A joined, streaming `PSClient` of `group` (empty: it names none)."""
    token = mint(ps, client_id, master)
    client = PSClient(ps.address, client_id, lambda: token, insecure=True)
    reaper.add(client.close)
    client.join(JoinSpec(group=group))
    client.start()
    return client


def models(groups, names):
    out = {}
    for g in names:
        out[g] = Observer(groups[g], f"observer.{g}").model()
    return out


def same_everywhere(groups, names):
    """Every named PS at one version with a bit-identical model (None while they differ)."""
    got = models(groups, names)
    versions = {v for v, _ in got.values()}
    first = next(iter(got.values()))[1]
    if len(versions) == 1 and all(np.array_equal(m, first) for _, m in got.values()):
        return next(iter(versions)), first
    return None


def push_all(clients, version_of, scale=0.01, seed=0):
    rng = np.random.default_rng(seed)
    deltas = {g: (rng.standard_normal(NUMEL) * scale).astype(np.float32) for g in clients}
    errors = []

    def run(g):
        try:
            push(clients[g], version_of(g), deltas[g])
        except Exception as exc:  # surfaced by the assertion below
            errors.append(f"{g}: {exc!r}")

    threads = [threading.Thread(target=run, args=(g,)) for g in clients]
    for t in threads:
        t.start()
    return threads, deltas, errors


@pytest.mark.long
def test_a_ps_killed_mid_ring_leaves_the_others_identical_and_rejoins_from_their_model(tmp_path, reaper):
    """g2 is SIGKILLed mid-ring: g0 and g1 exclude it and end at one version with the same bits; restarted,
    g2 takes their model, is added back by the next ring, and all three end identical again."""
    # Prepare: three groups, Θ0 from g0's master client, every PS in step at version 1
    groups = start_groups(tmp_path, reaper, 3, latency_ms=150)
    names = groups.names
    master = join(groups["g0"], "s.master", master=True, reaper=reaper, group="g0")
    init_model(master)
    wait_until(lambda: all(groups[g].status()["version"] == 1 for g in names), 30, "every PS to hold Θ0")
    clients = {g: join(groups[g], f"s.{g}", reaper=reaper, group=g) for g in names}
    # One ring with everyone
    threads, _, errors = push_all(clients, lambda g: 1)
    for t in threads:
        t.join(60)
    assert not errors
    state = wait_until(lambda: same_everywhere(groups, names), 30, "one version everywhere")
    v_before = state[0]
    assert v_before >= 2
    assert all(groups[g].status()["ring_allreduces"] >= 1 for g in names)

    # Execute: a second round; kill g2 once its ring has started
    threads, _, errors = push_all({g: clients[g] for g in ("g0", "g1")}, lambda g: v_before, seed=1)
    push_g2 = threading.Thread(target=lambda: _quiet_push(clients["g2"], v_before))
    push_g2.start()
    pattern = re.compile(rf"event=ring_start version={v_before} ")
    wait_until(lambda: pattern.search(groups["g2"].logs()), 30, "g2 to start the ring")
    groups["g2"].kill()
    for t in threads:
        t.join(60)

    # Assert: the survivors agree, bit for bit, on a version past the one g2 died in
    survivors = wait_until(lambda: same_everywhere(groups, ["g0", "g1"]), 60, "g0 and g1 to agree")
    assert survivors[0] > v_before
    assert not re.search(rf"event=ring_commit version={v_before} ", groups["g2"].logs())
    for g in ("g0", "g1"):
        assert groups[g].status()["ring_members"] == ["g0", "g1"]
        assert "event=ring_exclude" in groups[g].logs()

    # Execute: g2 comes back (from its own older checkpoint) and rejoins from the others' model
    groups["g2"].start()
    wait_until(lambda: "event=group_sync" in groups["g2"].logs().rsplit("event=listening", 1)[-1], 30,
               "g2 to sync from the group")
    c2 = join(groups["g2"], "s.g2b", reaper=reaper, group="g2")
    # g2 is added by the first ring g0 and g1 commit after its join request: rounds from g0's client until then
    joins_before = groups["g0"].logs().count("event=ring_join_request peer=g2")
    wait_until(lambda: groups["g0"].logs().count("event=ring_join_request peer=g2") > joins_before, 30,
               "g2's join request to reach g0")
    errors0 = []
    for round_ in range(10):
        t0, _, errs = push_all({"g0": clients["g0"]}, lambda g: groups["g0"].status()["version"], seed=2 + round_)
        for t in t0:
            t.join(60)
        errors0 += errs
        if groups["g2"].status()["ring_members"] == names:
            break
    wait_until(lambda: groups["g2"].status()["ring_members"] == names, 30, "g2 to be back in the ring")
    push(c2, groups["g2"].status()["version"], np.full(NUMEL, 0.001, np.float32))

    # Assert: all three at one version with the same bits, g2 included in the ring again
    final = wait_until(lambda: same_everywhere(groups, names), 60, "all three to agree again")
    assert final[0] > survivors[0]
    assert all(groups[g].status()["ring_members"] == names for g in names)
    assert not errors0
    assert not np.array_equal(final[1], theta0())


def _quiet_push(client, version):
    try:
        push(client, version, np.full(NUMEL, 0.002, np.float32))
    except Exception:  # its PS is killed under it: expected
        pass


def test_bad_group_peer_credentials_and_foreign_models_are_refused(tmp_path, reaper):
    """Unknown or other group at Join, wrong peer secret, another federation or model: clear refusals."""
    groups = start_groups(tmp_path, reaper, 2)
    master = join(groups["g0"], "s.master", master=True, reaper=reaper)
    init_model(master)
    wait_until(lambda: groups["g1"].status()["version"] == 1, 30, "g1 to fetch Θ0")
    g0 = groups["g0"]

    # A client naming an unknown group, or another group than its PS's
    stub = pb_grpc.ParameterServerStub(g0.channel())
    code, details = rpc_code(lambda: stub.Join(pb.JoinRequest(token=mint(g0, "s.x"), client_id="s.x", group="mars")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "unknown PS group 'mars'" in details
    assert "g0, g1" in details
    code, details = rpc_code(lambda: stub.Join(pb.JoinRequest(token=mint(g0, "s.y"), client_id="s.y", group="g1")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "serves group 'g0', not 'g1'" in details

    # PS-to-PS: wrong secret, another federation, another model
    peer = pb_grpc.PeerStub(g0.channel())
    secret = groups.peer_token.read_text()
    key = pb.RingKey(version=1, members=["g0", "g1"])
    good_layout = layout_digest(tuple(TensorEntry(n, s, d) for n, s, d in MANIFEST))

    def step(secret_, federation="groups-test", layout=good_layout):
        req = pb.RingStepRequest(federation=federation, layout=layout, sender="g1", key=key, phase="scatter")
        return peer.RingStep(req, metadata=(("authorization", f"Peer {secret_}"),), timeout=10)

    code, details = rpc_code(lambda: step("peer-wrong-secret-0123456789"))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "wrong PS peer credentials" in details
    code, details = rpc_code(lambda: step(secret, federation="someone-else"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "not 'someone-else'" in details
    other = layout_digest((TensorEntry("w", (7,), "float32"),))
    code, details = rpc_code(lambda: step(secret, layout=other))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "holds another model" in details
    code, details = rpc_code(lambda: peer.FetchModel(
        pb.FetchModelRequest(federation="groups-test", sender="g1"), metadata=(("authorization", "Peer nope"),),
        timeout=10).next())
    assert code == grpc.StatusCode.UNAUTHENTICATED
    # None of it moved anything: both PSs still hold Θ0
    assert {g0.status()["version"], groups["g1"].status()["version"]} == {1}

    # A PS started for a group the federation does not have
    bad = PSNode(tmp_path / "bad", None, extra=["--federation", str(groups.fed_file), "--group", "g9",
                                                 "--peer-token-file", str(groups.peer_token)])
    bad.proc = None
    with pytest.raises(Exception, match="unknown PS group 'g9'"):
        bad.start(timeout=30)
    reaper.add(bad.kill)


def test_a_stalled_ring_partner_is_timed_out_and_excluded(tmp_path, reaper):
    """g1 is frozen (SIGSTOP) with its PS still listening: g0's ring times out, excludes it and goes on; once
    resumed, g1 notices, takes g0's model and is back in the ring."""
    import signal

    groups = start_groups(tmp_path, reaper, 2)
    master = join(groups["g0"], "s.master", master=True, reaper=reaper)
    init_model(master)
    wait_until(lambda: groups["g1"].status()["version"] == 1, 30, "g1 to fetch Θ0")
    groups["g1"].proc.send_signal(signal.SIGSTOP)
    reaper.add(lambda: groups["g1"].proc.send_signal(signal.SIGCONT))
    t0 = time.monotonic()
    receipt = push(master, 1, np.full(NUMEL, 0.01, np.float32))
    # APPLIED, or ACCEPTED when the PS answers before it publishes the round (seen once under load)
    assert receipt.status in ("APPLIED", "ACCEPTED")
    wait_until(lambda: groups["g0"].status()["version"] == 2, 4.0 * 4 + 10, "g0 to close the round without g1")
    assert time.monotonic() - t0 < 4.0 * 4 + 10  # timeouts, not forever
    status = groups["g0"].status()
    assert status["version"] == 2 and status["ring_members"] == ["g0"]
    assert "event=ring_exclude" in groups["g0"].logs()

    # Resumed, g1 finds it was left out, takes g0's model and is added back by g0's next round
    groups["g1"].proc.send_signal(signal.SIGCONT)
    wait_until(lambda: "event=ring_join_request peer=g1" in groups["g0"].logs(), 30, "g1 to ask to rejoin")
    for _ in range(10):
        push(master, groups["g0"].status()["version"], np.full(NUMEL, 0.001, np.float32))
        if groups["g0"].status()["ring_members"] == ["g0", "g1"]:
            break
    wait_until(lambda: groups["g1"].status()["ring_members"] == ["g0", "g1"], 30, "g1 back in the ring")
    push(master, groups["g0"].status()["version"], np.full(NUMEL, 0.002, np.float32))
    assert wait_until(lambda: same_everywhere(groups, ["g0", "g1"]), 30, "g0 and g1 to agree")[0] >= 4
    assert "event=ring_excluded_here" in groups["g1"].logs()
