"""One hostile site, counted as one, over the wire against a real `geofed ps` with default settings.

A site credential mints client ids `<site>.<name>` up to its quota; whatever those ids send, the site holds one
delta per base version and round and one entry in the norm bound, and its bound comes from the *other* sites'
norms, so it cannot ratchet it up. The rules recomputed here (not with the PS's helpers):

- a site's delta is scaled to at most 3 × the median of the other sites' recent norms (each site's entry: the
  median of its last 5 accepted norms), and the federation's first delta to the start bound
  2 × 1.1 × lr × √H × √n;
- under FedAvg (η = 0.5, K = 1) a version moves the model by η × the bounded delta.

Refusals name their rule, count in `geofed_rejected_pushes` by reason and leave the model byte for byte.
"""

from __future__ import annotations

import math
import re
import time
import urllib.request

import grpc
import numpy as np
import pytest

from client_agent.errors import DeferredDeltaError
from geofed.codec import decoder_for, make_codec
from geofed.codec.sparse import sparse_params
from geofed.config import CodecConfig, ModelConfig, TrainingConfig
from geofed.protocol import geofed_pb2 as pb
from geofed.protocol import geofed_pb2_grpc as pb_grpc
from geofed.protocol.admin_client import AdminClient, AdminError
from geofed.protocol.auth import bearer
from geofed_testing.ledger import delta_for
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.wire import NUMEL, Observer, encoded, init_model, join, push, raw_push, rpc_code, theta0
from tests.reliability.test_rel_attacks import alternating, attack_messages

T = TrainingConfig()
H = T.local_steps
FULL_SYNC = T.batch_size * ModelConfig().block_size * H
ETA = 0.5  # the default global_lr
START = 2 * 1.1 * T.lr * math.sqrt(H) * math.sqrt(NUMEL)
# The model read back is the published one: the default grid_delta downlink rounds it to per-block grids (with
# server-side error feedback), so a measured step differs from the applied one by a little of that rounding.
SLACK = 1.02


def counter(ps: PSNode, name: str, label: str, value: str) -> float:
    """One labelled sample of a counter, scraped from the PS (0 when it has not counted yet)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ps.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf'^{name}_total{{{label}="{value}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def rejected(ps: PSNode, reason: str) -> float:
    return counter(ps, "geofed_rejected_pushes", "reason", reason)


def site_admin(ps: PSNode, credential: str) -> AdminClient:
    return AdminClient(ps.address, credential, insecure=True)


def site_session(ps: PSNode, credential: str, client_id: str) -> tuple[pb_grpc.ParameterServerStub, str]:
    """A raw stub and session of `client_id`, joined with a token its site credential minted."""
    with site_admin(ps, credential) as admin:
        token = admin.create_token(client_id)[0]
    stub = pb_grpc.ParameterServerStub(ps.channel())
    r = stub.Join(pb.JoinRequest(token=token, client_id=client_id), timeout=10)
    return stub, r.session


def decoded_norm(values: np.ndarray, codec: str) -> float:
    """‖δ‖ as the PS decodes it from `codec` (int8 rounds each value to its grid)."""
    header, payload = encoded(values, codec)
    decoder = decoder_for(header, max_numel=values.size)
    out = np.concatenate([v for _, v in decoder.feed(payload)]).astype(np.float64)
    decoder.finish()
    return float(np.linalg.norm(out))


def step(before: np.ndarray, after: np.ndarray) -> float:
    return float(np.linalg.norm(after.astype(np.float64) - before.astype(np.float64)))


@pytest.fixture
def ps(tmp_path, reaper: Reaper) -> PSNode:
    node = PSNode(tmp_path / "ps", {}, metrics=True)  # default federation settings
    reaper.add(node.kill)
    node.start()
    return node


def test_a_site_credential_mints_tokens_for_at_most_its_quota_of_client_ids(ps):
    with ps.admin() as admin:
        default = admin.create_site_credential("wide")
        narrow = admin.create_site_credential("narrow", max_client_ids=1)
    with site_admin(ps, default) as site:
        for i in range(4):  # the default quota (max_client_ids_per_site)
            site.create_token(f"wide.c{i}")
        site.create_token("wide.c0")  # a known id again: no new id
        with pytest.raises(AdminError) as refused:
            site.create_token("wide.c4")
    assert refused.value.code == "PERMISSION_DENIED" and "site quota" in refused.value.details
    with site_admin(ps, narrow) as site:
        site.create_token("narrow.only")
        with pytest.raises(AdminError, match="site quota"):
            site.create_token("narrow.second")


@pytest.mark.parametrize("codec", ["fp32", "int8"])
def test_sybil_ids_of_one_site_land_once_per_version_and_stay_within_three_honest_norms(ps, reaper, codec):
    """Two sites: an honest one and a hostile one pushing 1000 × honest norms through four client ids."""
    master = join(ps, "boot.master", master=True, start=False, reaper=reaper)
    init_model(master)
    with ps.admin() as admin:
        evil_credential = admin.create_site_credential("evil")
    honest = join(ps, "clinic.trainer", site="clinic", start=False, reaper=reaper)
    sybils = [site_session(ps, evil_credential, f"evil.s{i}") for i in range(4)]
    observer = Observer(ps, "clinic.observer")

    honest_norms: list[float] = []
    honest_steps: list[float] = []
    version, model = observer.model()
    for r in range(3):  # the honest site's history
        delta = delta_for(f"clinic/{r}", NUMEL)
        honest_norms.append(decoded_norm(delta, codec))
        push(honest, version, delta, codec=codec, tokens=FULL_SYNC, local_steps=H)
        new_version, new = observer.model()
        assert new_version == version + 1
        honest_steps.append(step(model, new))
        version, model = new_version, new
    for r in range(8):  # every Sybil id in turn, one per honest push: the bound must not ratchet
        if r:  # the honest site pushes between (the site's share of a round is one bounded delta)
            delta = delta_for(f"clinic/more/{r}", NUMEL)
            honest_norms.append(decoded_norm(delta, codec))
            push(honest, version, delta, codec=codec, tokens=FULL_SYNC, local_steps=H)
            version, model = observer.model()
        bound = 3 * float(np.median(honest_norms[-5:]))  # the other site's entry: the median of its latest norms
        stub, session = sybils[r % 4]
        evil = 1000 * delta_for(f"evil/{r}", NUMEL)
        result = raw_push(stub, session, attack_messages(evil, codec=codec, base=version, upload=f"evil/{r}"))
        assert result.status == pb.APPLIED
        new_version, new = observer.model()
        moved = step(model, new)
        assert moved <= SLACK * ETA * bound, f"round {r}: {moved / max(honest_steps):.2f} honest steps"
        assert moved <= 3 * SLACK * max(honest_steps)
        version, model = new_version, new

        # Another id of the same site on the same base version: refused by the site quota, model untouched.
        other_stub, other = sybils[(r + 1) % 4]
        refused_before = rejected(ps, "site_quota")
        code, details = rpc_code(
            lambda s=other_stub, o=other, v=version - 1, i=r: raw_push(
                s,
                o,
                attack_messages(
                    -1000 * delta_for(f"evil/again/{i}", NUMEL), codec=codec, base=v, upload=f"evil/again/{i}"
                ),
            )
        )
        assert code == grpc.StatusCode.ALREADY_EXISTS and "site quota" in details, details
        assert rejected(ps, "site_quota") - refused_before == 1
        assert observer.model()[1].tobytes() == model.tobytes()


def test_the_first_delta_of_a_federation_is_bounded_by_the_start_bound(ps, reaper):
    """A hostile site that pushes before any other: 1e17 per element lands as the start bound, which real AdamW
    deltas of the default model measure at about 2 × their own norm (docs/reliability.md)."""
    master = join(ps, "boot.master", master=True, start=False, reaper=reaper)
    init_model(master)
    with ps.admin() as admin:
        credential = admin.create_site_credential("evil")
    stub, session = site_session(ps, credential, "evil.first")
    observer = Observer(ps, "evil.observer")
    version, before = observer.model()

    assert (
        raw_push(stub, session, attack_messages(alternating(1e17), codec="int8", base=version, upload="first")).status
        == pb.APPLIED
    )

    _, after = observer.model()
    # Both models are read back from the grid_delta stream: Θ0's grid is set by Θ0's own scale, so its rounding
    # is the same however short the step is; SLACK covers it (0.16 % of the step at H 10).
    assert step(before, after) == pytest.approx(ETA * START, rel=SLACK - 1)


class SyncSites:
    """A sync-mode PS (default settings but `aggregation`), its master, two honest sites' clients, an observer and
    the credential of a hostile site."""

    def __init__(self, tmp_path, reaper: Reaper, aggregation: dict, hostile: str) -> None:
        self.ps = PSNode(tmp_path / "ps", {"aggregation": {"mode": "sync", **aggregation}})
        reaper.add(self.ps.kill)
        self.ps.start()
        init_model(join(self.ps, "boot.master", master=True, start=False, reaper=reaper))
        self.honest = [join(self.ps, f"site{i}.trainer", site=f"site{i}", start=False, reaper=reaper) for i in range(2)]
        with self.ps.admin() as admin:
            self.credential = admin.create_site_credential(hostile)
        self.observer = Observer(self.ps, "site0.observer")


def test_sessions_that_never_push_do_not_hold_a_sync_round_to_the_straggler_timeout(tmp_path, reaper):
    timeout_s = 8.0
    arena = SyncSites(tmp_path, reaper, {"straggler_timeout_s": timeout_s}, hostile="idle")
    ps, honest, observer = arena.ps, arena.honest, arena.observer
    idle = [site_session(ps, arena.credential, f"idle.s{i}") for i in range(3)]  # join, heartbeat, never push
    version, _ = observer.model()
    for i, c in enumerate(honest):  # the first round: everyone joined just now, so it may wait for the idle ones
        push(c, version, delta_for(f"sync/{i}/0", NUMEL), tokens=FULL_SYNC, local_steps=H)
    deadline = time.monotonic() + 3 * timeout_s
    while observer.model()[0] == version and time.monotonic() < deadline:
        time.sleep(0.2)
    version, _ = observer.model()
    time.sleep(timeout_s)  # the idle sessions are past their first straggler window and never pushed
    for stub, session in idle:  # and they stay alive
        stub.Heartbeat(pb.HeartbeatRequest(), metadata=bearer(session), timeout=10)

    t0 = time.monotonic()
    for i, c in enumerate(honest):
        push(c, version, delta_for(f"sync/{i}/1", NUMEL), tokens=FULL_SYNC, local_steps=H)
    while observer.model()[0] == version and time.monotonic() - t0 < 3 * timeout_s:
        time.sleep(0.1)
    closed_after = time.monotonic() - t0

    assert observer.model()[0] == version + 1
    assert closed_after < timeout_s / 2, f"the round waited {closed_after:.1f} s for sessions that never push"


class TwoSites:
    """A default PS (but `federation`), its master, an honest site's client and a hostile site's raw session."""

    def __init__(self, tmp_path, reaper: Reaper, federation: dict, manifest: list | None = None) -> None:
        self.ps = PSNode(tmp_path / "ps", federation, metrics=True)
        reaper.add(self.ps.kill)
        self.ps.start()
        master = join(self.ps, "boot.master", master=True, start=False, reaper=reaper)
        if manifest is None:
            init_model(master)
        else:  # Θ0 of another layout (a paradigm's exchanged tensors)
            numel = sum(int(np.prod(shape)) for _, shape, _ in manifest)
            push(master, 0, theta0(numel), init=True, manifest=manifest)
        with self.ps.admin() as admin:
            credential = admin.create_site_credential("evil")
        self.honest = join(self.ps, "clinic.trainer", site="clinic", start=False, reaper=reaper)
        self.evil = site_session(self.ps, credential, "evil.one")
        self.observer = Observer(self.ps, "clinic.observer")
        direction = delta_for("evil/direction", NUMEL).astype(np.float64)
        self.direction = direction / np.linalg.norm(direction)  # the one direction the hostile site pushes

    def parts(self) -> tuple:
        return self.ps, self.honest, self.evil, self.observer, self.direction


@pytest.mark.parametrize("outer", ["fedavg", "nesterov"])
def test_a_drift_just_under_the_bound_in_one_direction_stops_adding_up(tmp_path, reaper, outer):
    """The hostile site pushes 0.95 × its bound along one fixed direction, 24 times: without a displacement
    budget that adds up linearly (24 × 0.95 × 3 honest norms); its last 16 deltas may add up to 3 × √16 honest
    norms, so over 24 pushes (two windows at most) it moves the model along that direction at most twice that
    (under Nesterov, whose momentum sums a push's effect over the following rounds, its default η gives a push
    FedAvg's total weight)."""
    arena = TwoSites(tmp_path, reaper, {"aggregation": {"outer_optimizer": outer}})
    ps, honest, (stub, session), observer, direction = arena.parts()

    honest_norms, drift = [], 0.0
    version, model = observer.model()
    for r in range(24):
        delta = delta_for(f"clinic/{r}", NUMEL)
        honest_norms.append(float(np.linalg.norm(delta.astype(np.float64))))
        push(honest, version, delta, tokens=FULL_SYNC, local_steps=H)
        version, model = observer.model()
        limit = 3 * float(np.median(honest_norms[-5:]))
        evil = (0.95 * limit * direction).astype(np.float32)
        result = raw_push(stub, session, attack_messages(evil, codec="fp32", base=version, upload=f"drift/{r}"))
        assert result.status == pb.APPLIED
        new_version, new = observer.model()
        drift += float((new.astype(np.float64) - model) @ direction)
        version, model = new_version, new

    reference = float(np.median(honest_norms[-5:]))
    budget = 3 * reference * 4  # multiple × reference × √16
    # Each push's total weight on the model is ETA under both: FedAvg's η, and Nesterov's η/(1 − μ) at its
    # default η = 0.5 × (1 − μ).
    assert drift <= 2 * 1.05 * ETA * budget, f"drifted {drift / (ETA * reference):.1f} honest norms"
    assert counter(ps, "geofed_bounded_deltas", "rule", "displacement_budget") > 0
    logs = ps.logs()
    assert "rule=displacement_budget" in logs
    assert "event=delta_bounded client='clinic.trainer'" not in logs  # honest deltas are never scaled


# A LoRA federation's exchanged vector: the adapters A (r × in) and B (out × r) of one layer.
LORA_MANIFEST = [("h.lora_A.weight", (4, 50), "float32"), ("h.lora_B.weight", (60, 4), "float32")]
BURSTS = [
    ("fp32", "fedavg", 1, "pretrain"),
    ("fp32", "fedavg", 4, "pretrain"),
    ("int8", "nesterov", 4, "pretrain"),
    ("fp32", "adam", 4, "pretrain"),
    ("int8", "fedavg", 4, "lora"),
    ("sparse", "fedavg", 4, "pretrain"),
]
SPARSE = {"name": "sparse", "sparse_chunk": 512, "sparse_density": 0.02, "sparse_value_bits": 2}


@pytest.mark.parametrize(
    ("codec", "outer", "ids", "paradigm"), BURSTS, ids=[f"{c}-{o}-{i}ids-{p}" for c, o, i, p in BURSTS]
)
def test_a_burst_of_pushes_each_on_the_newest_version_lands_one_bounded_delta_per_round(
    tmp_path, reaper, codec, outer, ids, paradigm
):
    """In async mode every push makes a version, so the hostile site can push again on the version its own delta
    made (through one client id, or several). What it lands before the other site pushes again adds up to at
    most one delta's bound (3 × the other site's median norm): the first push of a burst lands (bounded), the
    rest would add nothing and are refused (reason round_share), leaving the model byte for byte; honest
    deltas are never scaled or refused."""
    lora = paradigm == "lora"
    federation = {"aggregation": {"outer_optimizer": outer}, **({"paradigm": {"name": "lora"}} if lora else {})}
    encoder = make_codec("sparse", sparse=sparse_params(CodecConfig(**SPARSE))) if codec == "sparse" else None
    if encoder is not None:
        federation["codec"] = SPARSE
    arena = TwoSites(tmp_path, reaper, federation, LORA_MANIFEST if lora else None)
    numel = 4 * 50 + 60 * 4 if lora else NUMEL
    ps, honest, _, observer, _ = arena.parts()
    with ps.admin() as admin:
        credential = admin.create_site_credential("burst")
    sessions = [site_session(ps, credential, f"burst.s{i}") for i in range(ids)]
    honest_steps = []
    version, model = observer.model()
    for r in range(6):
        delta = delta_for(f"clinic/{r}", numel)
        if encoder is None:
            push(honest, version, delta, codec=codec, tokens=FULL_SYNC, local_steps=H)
        else:
            header, frames = encoder.encode(delta)
            honest.push(base_version=version, codec_header=header, frames=frames, num_tokens=FULL_SYNC, local_steps=H)
        new_version, new = observer.model()
        honest_steps.append(step(model, new))
        version, model = new_version, new
        if r < 3:  # the honest site's history first
            continue
        refused_before = rejected(ps, "round_share")
        for k in range(4):
            stub, session = sessions[k % ids]
            messages = attack_messages(1000 * delta_for(f"burst/{r}/{k}", numel), codec=codec, base=version,
                                       upload=f"b/{r}/{k}", encoder=encoder)  # fmt: skip
            if k == 0:
                assert raw_push(stub, session, messages).status == pb.APPLIED
                first_version, model = observer.model()
                assert first_version == version + 1
                version = first_version
                continue
            code, details = rpc_code(lambda s=stub, se=session, m=messages: raw_push(s, se, m))
            assert code == grpc.StatusCode.ABORTED and "round share" in details, details
            assert observer.model()[1].tobytes() == model.tobytes()  # the refusal changed nothing
        assert rejected(ps, "round_share") - refused_before == 3
    assert observer.model()[0] == version
    logs = ps.logs()
    assert "event=delta_bounded client='clinic.trainer'" not in logs
    assert "client=clinic.trainer" not in re.sub(r"(?m)^(?!.*event=push_rejected).*$", "", logs)


def test_an_honest_site_put_off_by_its_round_share_lands_its_next_delta_once_another_site_pushed(tmp_path, reaper):
    """The client's side of the round share: `PSClient.send` raises DeferredDeltaError (ABORTED over the wire),
    the model is unchanged, and the site's next delta lands once the other site's delta has opened a new
    round."""
    arena = TwoSites(tmp_path, reaper, {})
    ps, honest, (stub, session), observer, _ = arena.parts()
    version, model = observer.model()
    for r in range(3):  # both sites' norm histories
        push(honest, version, delta_for(f"clinic/{r}", NUMEL), tokens=FULL_SYNC, local_steps=H)
        version, _ = observer.model()
        raw_push(stub, session, attack_messages(delta_for(f"evil/{r}", NUMEL), codec="fp32", base=version,
                                                upload=f"e/{r}"))  # fmt: skip
        version, model = observer.model()
    landed = 0
    for k in range(8):  # the honest site pushes again on the versions its own deltas made
        try:
            push(honest, version, delta_for(f"clinic/again/{k}", NUMEL), tokens=FULL_SYNC, local_steps=H)
        except DeferredDeltaError as exc:
            assert "round share" in str(exc)
            break
        landed += 1
        version, model = observer.model()
    else:
        pytest.fail("the round share never put the honest site off")
    assert 1 <= landed <= 3  # its deltas in the round add up to its bound: about 3 of the other site's norms
    assert observer.model()[1].tobytes() == model.tobytes()  # the refusal changed nothing
    raw_push(stub, session, attack_messages(delta_for("evil/next", NUMEL), codec="fp32", base=version, upload="e/n"))
    version, _ = observer.model()
    receipt = push(honest, version, delta_for("clinic/next", NUMEL), tokens=FULL_SYNC, local_steps=H)
    assert receipt.status == "APPLIED" and receipt.version == version + 1


def test_without_the_round_share_a_site_lands_a_bounded_delta_on_every_version(tmp_path, reaper):
    arena = TwoSites(tmp_path, reaper, {"aggregation": {"round_share": False}})
    ps, honest, (stub, session), observer, _ = arena.parts()
    version, _ = observer.model()
    for r in range(3):
        push(honest, version, delta_for(f"clinic/{r}", NUMEL), tokens=FULL_SYNC, local_steps=H)
        version, _ = observer.model()
        raw_push(stub, session, attack_messages(delta_for(f"evil/{r}", NUMEL), codec="fp32", base=version,
                                                upload=f"e/{r}"))  # fmt: skip
        version, _ = observer.model()
    for k in range(8):
        receipt = push(honest, version, delta_for(f"clinic/again/{k}", NUMEL), tokens=FULL_SYNC, local_steps=H)
        assert receipt.status == "APPLIED"
        version = receipt.version
    assert rejected(ps, "round_share") == 0
