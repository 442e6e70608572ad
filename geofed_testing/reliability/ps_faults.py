"""Server-side faults (paper §III-B4): the PS SIGKILLed mid-push and mid-round, restarted from its
checkpoint; a PS that comes back behind its clients; a PS down longer than a client's retry budget;
a full disk while checkpointing. Clients here are in-process `PSClient`s (it is the PS that dies).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from client_agent.connection.model_waits import DEFERRED_WAIT_S
from client_agent.connection.ps_client import JoinError, PSClient, PushError, StaleDeltaError
from client_agent.errors import DeferredDeltaError
from geofed_apps.launch import wait_until
from geofed_apps.wan import LinkProfile, WanProxy
from geofed_testing.ledger import EXACT_ASYNC, account, delta_for
from geofed_testing.procs import Reaper
from geofed_testing.wire import join, push
from ps_server.checkpoint import CheckpointStore

from .disk import SmallDisk
from .scenario import Federation, ScenarioResult


@dataclass
class Pusher:
    """A thread pushing deltas, each named by (client, round, base version) and logged, until every pusher of
    its `crew` has `rounds` receipts. Like a federation's sites, which train for the run rather than for a count,
    none stops while another still needs rounds: a site that pushed twice since the others last did waits for
    them (the PS's round share), and they are still pushing.

    It stands in for the client agent and is kinder than it in these ways: it pushes a ready-made delta at once
    instead of training between pushes; its waits after a stale or deferred push mirror
    `client_agent.connection.model_waits.next_model` but end as soon as the crew is finished (the agent's stale
    wait has no end but the run's); it never leaves (an agent whose run ends closes its session, and after 45 s its site
    no longer holds the others' round share); and it keeps no checkpoint of its upload, so it cannot show the
    agent's exactly-once resend after its own relaunch (tests/e2e/test_client_relaunch.py does)."""

    client: PSClient
    numel: int
    rounds: int
    crew: list[Pusher] = field(default_factory=list)  # every pusher of the scenario, this one included
    attempted: set[str] = field(default_factory=set)
    receipts: list[tuple[str, str, float, int]] = field(default_factory=list)  # tag, status, mono, attempts
    errors: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # refused as based on a version the PS lost
    deferred: list[str] = field(default_factory=list)  # refused: the site's round share was spent
    busy: bool = False

    def start(self) -> Pusher:
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"pusher-{self.client.client_id}")
        self.thread.start()
        return self

    def finished(self) -> bool:
        return all(len(p.receipts) >= p.rounds for p in self.crew or [self])

    def _wait(self, what: str, get, timeout: float = 60.0, required: bool = True):
        """`get(slice_s)` until it returns a model, the crew is finished (None) or `timeout` passes (None; an
        error when the model was `required`)."""
        deadline = time.monotonic() + timeout
        while not self.finished():
            got = get(1.0)
            if got is not None:
                return got
            if time.monotonic() > deadline:
                if required:
                    self.errors.append(f"{self.client.client_id}: no {what} within {timeout:.0f} s (receipts "
                                       f"{[(t, s) for t, s, *_ in self.receipts]}, stale {self.stale}, "
                                       f"deferred {self.deferred})")
                return None
        return None

    def _run(self) -> None:
        # The PS takes one delta per site and base version: after a landed delta the next one needs a newer model.
        model = self._wait("global model", lambda s: self.client.wait_for_version(0, timeout=s))
        seq = 0
        while model is not None and not self.finished():
            tag = f"{self.client.client_id}/r{seq}/b{model.version}"
            seq += 1
            self.attempted.add(tag)
            self.busy = True
            try:
                r = push(self.client, model.version, delta_for(tag, self.numel))
            except StaleDeltaError as exc:  # refused, and the client knows: like the agent, take the next model
                self.stale.append(f"{tag}: {exc}")
                model = self._wait("model after a stale push",
                                   lambda s, held=model: self.client.wait_for_fresh(held, timeout=s))
                continue
            except DeferredDeltaError:  # the site's round is full: like the agent, train again on what comes next
                self.deferred.append(tag)
                model = self._wait("model after a deferred push",
                                   lambda s, held=model: self.client.wait_for_fresh(held, timeout=s),
                                   timeout=DEFERRED_WAIT_S, required=False) or model
                continue
            except (PushError, JoinError) as exc:
                self.errors.append(f"{tag}: {type(exc).__name__}: {exc}")
                return
            finally:
                self.busy = False
            self.receipts.append((tag, r.status, time.monotonic(), r.attempts))
            base = model.version
            model = self._wait(f"global model newer than v{base}",
                               lambda s, base=base: self.client.wait_for_version(base, timeout=s))

    @property
    def receipted(self) -> set[str]:
        return {t for t, *_ in self.receipts}


def ps_killed_mid_push(workdir: Path, reaper: Reaper, downtime_s: float = 0.0, n_clients: int = 3,
                       rounds: int = 5) -> ScenarioResult:
    """SIGKILL the PS while pushes are in flight, restart it on its checkpoint dir after `downtime_s`."""
    numel = 500_000
    res = ScenarioResult(
        "PS SIGKILL mid-push" + (f", down {downtime_s:.0f} s" if downtime_s else ""),
        f"SIGKILL of the PS while {n_clients} clients' 2 MB deltas were uploading/aggregating; restart on the same "
        f"checkpoint dir" + (f" after {downtime_s:.0f} s" if downtime_s else " at once"),
    )
    fed = Federation.start(workdir, reaper, numel)
    proxy = WanProxy("127.0.0.1", fed.ps.port, LinkProfile(up_bytes_per_s=8_000_000))
    proxy.start()
    reaper.add(proxy.stop)
    clients = [join(fed.ps, f"psk.c{i}", address=f"127.0.0.1:{proxy.port}", reaper=reaper) for i in range(n_clients)]
    pushers = [Pusher(c, numel, rounds) for c in clients]
    for p in pushers:
        p.crew = pushers
        p.start()
    wait_until(lambda: sum(len(p.receipts) for p in pushers) >= n_clients, 60, "first pushes acknowledged")

    wait_until(lambda: any(p.busy for p in pushers), 30, "a push in flight", period=0.002)
    t_kill = time.monotonic()
    fed.ps.kill()
    durable = max(fed.ps.checkpointed_versions())
    acked_before = sum(len(p.receipts) for p in pushers)
    time.sleep(downtime_s)
    fed.ps.start()
    t_back = time.monotonic()
    restarted = fed.ps.status()["version"]
    res.check(restarted == durable, "PS resumed at its last checkpointed version (never further back)",
              f"restarted at v{restarted}, last checkpoint v{durable}")
    for p in pushers:
        p.thread.join(120)
    errors = [e for p in pushers for e in p.errors]
    res.details.update(errors=errors, acked_before_kill=acked_before,
                       duplicates=sum(s == "DUPLICATE" for p in pushers for _, s, _, _ in p.receipts),
                       retried=sum(a > 1 for p in pushers for *_, a in p.receipts),
                       resync=sum(len(p.stale) for p in pushers),
                       deferred=sum(len(p.deferred) for p in pushers))
    res.check(not errors, "every client rode out the outage (no push given up)", errors)
    after = [m for p in pushers for _, _, m, _ in p.receipts if m > t_kill]
    res.resume_s = min(after) - t_kill if after else None
    back = res.details["resume_after_ps_back_s"] = min(after) - t_back if after else float("inf")
    attempted = set().union(*(p.attempted for p in pushers))
    receipted = set().union(*(p.receipted for p in pushers))
    version, _ = fed.ledger(attempted, receipted, res)
    # The client's own retry backoff is capped at 10 s; more than that is time spent not even trying.
    res.check(back <= 13.0, "clients push again within 13 s of the PS being back",
              f"{back:.1f} s: geofed/protocol/channel.py CHANNEL_OPTIONS leave gRPC's reconnect backoff at its "
              "120 s default (grpc.max_reconnect_backoff_ms), so after a long outage the channel sits in "
              "TRANSIENT_FAILURE well after the PS is back and every retry fails fast with UNAVAILABLE")
    res.outcome = (f"restarted at checkpoint v{durable}; clients pushing again {back:.1f} s after it was back; "
                   f"in-flight pushes retransmitted ({res.details['retried']} retried, "
                   f"{res.details['duplicates']} answered DUPLICATE, {res.details['resync']} told to resync); "
                   f"v{version}")
    return res


def ps_killed_mid_round(workdir: Path, reaper: Reaper, *, graceful: bool = False) -> ScenarioResult:
    """K = 2: one delta is ACCEPTED (buffered, not yet applied) when the PS stops; it must not vanish.

    `graceful`: SIGTERM instead of SIGKILL, as Kubernetes rolls the PS on every spec change. The final
    checkpoint must not remember the buffered delta's upload id as received, or the client's resend is
    answered DUPLICATE and the delta is lost.
    """
    numel = 50_000
    federation = {**EXACT_ASYNC,
                  "aggregation": {**EXACT_ASYNC["aggregation"], "buffer_size": 2, "buffer_timeout_s": 4.0}}
    how = "SIGTERM" if graceful else "SIGKILL"
    res = ScenarioResult(f"PS {how} mid-round (buffered delta)",
                         f"{how} of the PS holding one ACCEPTED delta of a K=2 round; restart on its checkpoint")
    fed = Federation.start(workdir, reaper, numel, federation=federation, install=False)
    # Joined before θ0's checkpoint, so their rejoin tokens survive the crash even on a PS that only persists
    # credentials at checkpoints (see ps_crash_strands_new_clients). Streams run, as in the agent.
    a, b = (join(fed.ps, f"round.{n}", reaper=reaper) for n in "ab")
    fed.install()
    da, db = delta_for("round.a", numel), delta_for("round.b", numel)
    ra = push(a, 1, da)
    res.check(ra.status == "ACCEPTED", "first delta buffered (ACCEPTED)", ra)
    t_kill = time.monotonic()
    if graceful:
        res.check(fed.ps.terminate() == 0, "the PS stopped cleanly on SIGTERM")
    else:
        fed.ps.kill()
    fed.ps.start()
    rb = push(b, 1, db)
    res.details["second_push"] = rb.status

    def a_landed():
        version, model = fed.observer.model()
        acc = account(model, fed.theta0, {"a": da, "b": db})
        return (version, acc) if acc.coefficients["a"] > 0.25 else None

    try:
        version, acc = wait_until(a_landed, 20, "the ACCEPTED delta to reach the model", period=0.5)
        res.resume_s = time.monotonic() - t_kill
    except TimeoutError:
        version, model = fed.observer.model()
        acc = account(model, fed.theta0, {"a": da, "b": db})
    res.details.update(version=version, coefficients=acc.coefficients)
    res.lost = int(acc.coefficients["a"] < 0.25)
    res.check(acc.residual < 1e-4, "model = θ0 + a combination of whole deltas", acc.residual)
    res.check(not res.lost, f"the ACCEPTED delta survived the {how} (in the model within 20 s of the restart)",
              f"coefficients {acc.coefficients}: neither the PS checkpoint nor the client brought it back")
    c = acc.coefficients
    one_round = version == 2 and abs(c["a"] - 0.5) < 1e-3 and abs(c["b"] - 0.5) < 1e-3
    two_rounds = version == 3 and abs(c["a"] - 1) < 1e-3 and abs(c["b"] - 1) < 1e-3
    res.check(one_round or two_rounds, "a state the rule can produce: mean of both (v2) or each alone (v3)",
              f"v{version} {c}")
    res.outcome = (f"ACCEPTED delta resent after the restart and applied once "
                   f"({'one round of both' if one_round else 'two rounds'}); v{version}")
    return res


def ps_crash_strands_new_clients(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """A client joins after the PS's last checkpoint; the PS crashes; the client must get back in."""
    numel = 20_000
    res = ScenarioResult("PS SIGKILL before any checkpoint knows a client",
                         "SIGKILL of the PS after a client joined but before the next checkpoint; restart")
    fed = Federation.start(workdir, reaper, numel)
    c = join(fed.ps, "late.c0", reaper=reaper, start=False)
    t_kill = time.monotonic()
    fed.ps.kill()
    fed.ps.start()
    try:
        receipt = push(c, 1, delta_for("late/0", numel))
        outcome = f"{receipt.status} v{receipt.version}"
    except (JoinError, PushError) as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    res.details["push_after_restart"] = outcome
    res.check(outcome.startswith("APPLIED"), "the client rejoins the restarted PS and its push lands",
              f"{outcome} — neither its one-time token (minted after v1's checkpoint) nor its rejoin token "
              "is in the checkpoint: ps_server/grpc_api.py CreateToken and ParameterServerCore.join never "
              "checkpoint the registry (CreateSiteCredential does)")
    res.resume_s = time.monotonic() - t_kill
    res.outcome = "client rejoined"
    return res


def ps_restarts_behind_clients(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """checkpoint_every=2: the PS dies after publishing v3 (not durable) and comes back at v2.

    A client that already holds v3 must be steered back to v2 (a resync it can act on), not refused with
    a non-retryable error that ends the agent.
    """
    numel = 20_000
    res = ScenarioResult("PS comes back behind its clients",
                         "SIGKILL of the PS right after it published v3 with checkpoint_every=2 (v3 never durable)")
    fed = Federation.start(workdir, reaper, numel, extra=["--checkpoint-every", "2"])
    c = join(fed.ps, "behind.c0", reaper=reaper)
    push(c, 1, delta_for("behind/1", numel))
    r = push(c, 2, delta_for("behind/2", numel))
    res.check(r.version == 3, "v3 published", r)
    # Clients fetch on demand (one difference per sync): ask for what is newer than v2, as the agent does.
    v3 = wait_until(lambda: (m := c.wait_for_version(2, timeout=1.0)) is not None and m.version == 3 and m, 20,
                    "client receiving v3")
    res.check(fed.ps.checkpointed_versions()[-1] == 2, "last durable checkpoint is v2",
              fed.ps.checkpointed_versions())
    t_kill = time.monotonic()
    fed.ps.kill()
    fed.ps.start()
    res.check(fed.ps.status()["version"] == 2, "PS back at v2 (its checkpoint)")
    try:
        receipt = push(c, 3, delta_for("behind/3", numel))
        outcome = f"accepted as {receipt.status}"
    except StaleDeltaError as exc:
        outcome = f"StaleDeltaError: {exc}"
    except PushError as exc:
        outcome = f"PushError: {exc}"
    res.details["push_on_lost_version"] = outcome
    res.check(not outcome.startswith("PushError"),
              "a delta based on the lost v3 is refused as stale (recoverable), not with a fatal PushError",
              f"{outcome} — ps_server/aggregation/rounds.py admit() raises 'ahead of the global version' "
              "(INVALID_ARGUMENT), which client_agent/connection/ps_client.py turns into PushError and the agent exits")
    _, ps_model = fed.observer.model()
    try:
        wait_until(lambda: (m := c.wait_for_fresh(v3, timeout=1.0)) is not None and m.version == 2
                   and np.array_equal(m.flat, ps_model), 15, "client model stream resyncing to the PS's v2")
        resynced = True
    except TimeoutError:
        resynced = False
    res.check(resynced, "client's model stream falls back to the PS's v2",
              f"client still holds v{c.latest().version}: client_agent/connection/model_stream.py "
              "ModelStream.run asks for have_version=3 and the PS only sends versions newer than that")
    res.resume_s = time.monotonic() - t_kill
    res.outcome = "client resynced to v2"
    return res


def disk_full_while_checkpointing(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """The checkpoint volume fills up: the PS keeps serving, counts failures, keeps the older checkpoint."""
    numel = 500_000  # a checkpoint is ~2 MB
    ckpt_dir = workdir / "ckptfs"
    disk = SmallDisk(ckpt_dir, 8 << 20, reaper)
    res = ScenarioResult("PS disk full while checkpointing", disk.description)
    fed = Federation.start(workdir, reaper, numel, extra=["--keep-checkpoints", "2"], metrics=True,
                           checkpoint_dir=ckpt_dir / "ps")
    c = join(fed.ps, "disk.c0", reaper=reaper, start=False)
    ds = [delta_for(f"disk/{i}", numel) for i in range(4)]
    push(c, 1, ds[0])  # v2, checkpointed
    res.check(fed.ps.checkpointed_versions()[-1] == 2, "v2 checkpointed before the disk fills")
    disk.fill(fed.ps.pid, limit_bytes=1 << 20)
    r3 = push(c, 2, ds[1])
    r4 = push(c, 3, ds[2])
    res.check((r3.status, r4.status, r4.version) == ("APPLIED", "APPLIED", 4), "PS keeps serving pushes", (r3, r4))
    failures = fed.ps.metric("geofed_checkpoint_failures_total")
    res.details["checkpoint_failures"] = failures
    res.check(failures >= 2, "geofed_checkpoint_failures counts the failed checkpoints", failures)
    res.check("event=checkpoint_failed" in fed.ps.logs(), "failure logged (event=checkpoint_failed)")
    version, model = fed.observer.model()
    res.check(version == 4 and np.allclose(model, fed.theta0 + ds[0] + ds[1] + ds[2], atol=1e-5),
              "PS serves the current model while checkpoints fail", version)
    store_files = sorted(p.name for p in (ckpt_dir / "ps").iterdir())
    res.details["files_while_full"] = store_files
    res.check(not [n for n in store_files if n.endswith(".tmp")], "no partial checkpoint left behind", store_files)
    older = CheckpointStore(ckpt_dir / "ps", keep=2).load_latest()
    res.check(older is not None and older.version == 2 and np.allclose(older.flat, fed.theta0 + ds[0], atol=1e-5),
              "the older checkpoint (v2) is intact and loadable", older and older.version)
    disk.free()
    t_free = time.monotonic()
    push(c, 4, ds[3])  # v5, durable again
    wait_until(lambda: 5 in fed.ps.checkpointed_versions(), 20, "a checkpoint after space returns")
    res.resume_s = time.monotonic() - t_free
    fed.ps.kill()
    fed.ps.start()
    version, model = fed.observer.model()
    expected = fed.theta0 + ds[0] + ds[1] + ds[2] + ds[3]
    res.check(version == 5 and np.allclose(model, expected, atol=1e-5),
              "after a crash the PS resumes from the checkpoint written once space returned (v5)", version)
    res.details["version"] = version
    res.outcome = (f"{failures:.0f} checkpoints failed, pushes kept landing, v2 file intact; "
                   f"v5 durable once space returned")
    return res


SCENARIOS = {
    "ps_mid_push": ps_killed_mid_push,
    "ps_mid_round": ps_killed_mid_round,
    "ps_mid_round_sigterm": functools.partial(ps_killed_mid_round, graceful=True),
    "ps_strands_new_clients": ps_crash_strands_new_clients,
    "ps_behind_clients": ps_restarts_behind_clients,
    "disk_full": disk_full_while_checkpointing,
}
