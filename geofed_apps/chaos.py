"""`geofed local --chaos SPEC`: a seeded schedule of faults injected into a running local federation.

The spec is compact, `preempt=60,kill=0,flap=90,ps-restart=1,join=1,leave=1`:

- `preempt=S`: each client is preempted on average every S seconds (a Poisson process per client): SIGTERM,
  its exit awaited for a grace period (then SIGKILL, as the kubelet does), and a relaunch with a fresh
  one-time token on the same work directory, as the operator relaunches a preempted client Job.
- `kill=S`: the same with SIGKILL and no grace: a host lost outright.
- `flap=S`: each client's WAN emulator link (`--link`) blackholes for `FLAP_S` seconds, on average every S s.
- `ps-restart=R`: the PS is stopped (SIGTERM, a final checkpoint) and started again on its checkpoint
  directory and port R times in the run.
- `join=N`: N sites join mid-run: their clients are not started with the others but at a time in the fault
  window, each with a one-time token of its own, as a new institution's first client Job.
- `leave=N`: N sites leave for good: their client is stopped (SIGTERM, grace) and not relaunched; their
  sessions close and the federation goes on without them.

0 (or leaving a key out) turns a fault off. Client 0 (the master, which installs Θ0) neither joins late nor
leaves; the sites that do are drawn from the others, a site never both. The schedule is a pure function of
the spec, the number of clients, the run's duration and `--seed`, so a run's faults can be repeated.
Faults fall between `START_FRACTION` and `END_FRACTION` of the duration: a client relaunched (or joining)
at the last fault still has a quarter of the run to join and push. The faults themselves are done by
`ChaosRunner`, which `geofed local` ticks from its progress loop; `NO_CHAOS` is its null object.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .launch import stop

FLAP_S = 5.0  # how long a link flap blackholes the link, in seconds
GRACE_S = 30.0  # how long a preempted client may take to exit before SIGKILL (a pod's default grace period)
START_FRACTION = 0.25  # no fault before this share of the duration: the clients have started
END_FRACTION = 0.75  # nor after this share: a relaunched client has time to join and push again

KINDS = ("preempt", "kill", "flap", "ps-restart", "join", "leave")
_COUNTED = ("ps-restart", "join", "leave")  # whole numbers in the run, not mean seconds between faults
_PLURALS = {"preempt": "preemptions", "kill": "kills", "flap": "flaps", "ps-restart": "PS restarts",
            "join": "joins", "leave": "leaves"}


class ChaosSpecError(ValueError):
    """A `--chaos` spec that cannot be read; the message says which part and why."""


@dataclass(frozen=True, slots=True)
class ChaosSpec:
    """What `--chaos` asks for; 0 turns a fault off."""

    preempt_s: float = 0.0
    """Mean seconds between preemptions (SIGTERM, grace, relaunch), per client."""
    kill_s: float = 0.0
    """Mean seconds between hard kills (SIGKILL, relaunch), per client."""
    flap_s: float = 0.0
    """Mean seconds between link flaps (a `FLAP_S` blackhole of the client's `--link`), per client."""
    ps_restarts: int = 0
    """PS restarts (stop, then start on the same checkpoint directory) in the whole run."""
    joins: int = 0
    """Sites whose client starts mid-run instead of with the others."""
    leaves: int = 0
    """Sites whose client is stopped mid-run and not relaunched."""

    @property
    def enabled(self) -> bool:
        return bool(self.preempt_s or self.kill_s or self.flap_s or self.ps_restarts or self.joins or self.leaves)


@dataclass(frozen=True, slots=True)
class Fault:
    """One scheduled fault: `kind` (one of `KINDS`) at `at_s` seconds into the run, on client `client`
    (an index; None for a PS restart)."""

    at_s: float
    kind: str
    client: int | None = None


def parse_spec(text: str) -> ChaosSpec:
    """`preempt=60,kill=0,flap=90,ps-restart=1` as a `ChaosSpec`; `ChaosSpecError` on anything else."""
    values: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ChaosSpecError(f"empty entry in {text!r}; expected KEY=VALUE[,KEY=VALUE...] with keys "
                                 f"{', '.join(KINDS)}")
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq:
            raise ChaosSpecError(f"{part!r} is not KEY=VALUE (keys: {', '.join(KINDS)})")
        if key not in KINDS:
            raise ChaosSpecError(f"unknown fault {key!r}; known: {', '.join(KINDS)}")
        if key in values:
            raise ChaosSpecError(f"{key} is given twice")
        try:
            value = float(raw) if key not in _COUNTED else int(raw)
        except ValueError:
            kind = (f"a whole number of {_PLURALS[key].split()[-1].lower()}" if key in _COUNTED
                    else "mean seconds between faults")
            raise ChaosSpecError(f"{key}={raw.strip()!r}: expected {kind}") from None
        if value < 0 or value != value or value == float("inf"):
            raise ChaosSpecError(f"{key}={raw.strip()}: must be 0 (off) or a positive finite number")
        values[key] = value
    return ChaosSpec(preempt_s=values.get("preempt", 0.0), kill_s=values.get("kill", 0.0),
                     flap_s=values.get("flap", 0.0), ps_restarts=int(values.get("ps-restart", 0)),
                     joins=int(values.get("join", 0)), leaves=int(values.get("leave", 0)))


def window(duration_s: float) -> tuple[float, float]:
    """The span of the run, in seconds from its start, that faults fall in."""
    return START_FRACTION * duration_s, END_FRACTION * duration_s


def joining(spec: ChaosSpec, clients: int, seed: int) -> tuple[int, ...]:
    """The clients whose sites join mid-run (not started with the others), drawn from all but client 0."""
    return tuple(sorted(random.Random(f"{seed}/join").sample(range(1, clients), spec.joins)))


def leaving(spec: ChaosSpec, clients: int, seed: int) -> tuple[int, ...]:
    """The clients whose sites leave for good, drawn from all but client 0 and the joining ones."""
    others = [i for i in range(1, clients) if i not in joining(spec, clients, seed)]
    return tuple(sorted(random.Random(f"{seed}/leave").sample(others, spec.leaves)))


def build_schedule(spec: ChaosSpec, clients: int, duration_s: float, seed: int) -> tuple[Fault, ...]:
    """Every fault of the run in time order: a Poisson process per client and per client fault (mean gap
    its seconds in `spec`) over `window(duration_s)`, and `ps_restarts` PS restarts, each joining site's join
    and each leaving site's leave at a time drawn uniformly over it. Each process draws from its own
    generator, seeded from `seed`, the kind and the client, so turning one fault on or off leaves the
    others' times as they were."""
    start, end = window(duration_s)
    faults: list[Fault] = []
    for kind, mean_s in (("preempt", spec.preempt_s), ("kill", spec.kill_s), ("flap", spec.flap_s)):
        if not mean_s:
            continue
        for i in range(clients):
            rng = random.Random(f"{seed}/{kind}/{i}")
            t = start + rng.expovariate(1.0 / mean_s)
            while t < end:
                faults.append(Fault(round(t, 3), kind, i))
                t += rng.expovariate(1.0 / mean_s)
    rng = random.Random(f"{seed}/ps-restart")
    faults += [Fault(round(rng.uniform(start, end), 3), "ps-restart") for _ in range(spec.ps_restarts)]
    for kind, chosen in (("join", joining(spec, clients, seed)), ("leave", leaving(spec, clients, seed))):
        faults += [Fault(round(random.Random(f"{seed}/{kind}/{i}").uniform(start, end), 3), kind, i) for i in chosen]
    return tuple(sorted(faults, key=lambda f: (f.at_s, KINDS.index(f.kind), f.client or 0)))


def check_spec(spec: ChaosSpec, *, link: bool, single_ps: bool, clients: int) -> str | None:
    """Why `spec` cannot run in this `geofed local` (None: it can)."""
    if spec.joins + spec.leaves > clients - 1:
        return (f"--chaos join={spec.joins},leave={spec.leaves} needs {spec.joins + spec.leaves + 1} clients or "
                f"more (client 0, the master, neither joins late nor leaves, and no site does both); "
                f"--clients is {clients}")
    if spec.flap_s and not link:
        return "--chaos flap needs --link: a flap blackholes the client's emulated WAN link"
    if spec.ps_restarts and not single_ps:
        return "--chaos ps-restart needs a single PS (no --ps-groups or --ps-shards)"
    return None


class ChaosRunner:
    """Does the schedule's faults as the run reaches them; `tick` is called from the progress loop.

    It acts on the caller's own `clients` list (a relaunched client replaces the one it stands for), and
    reaches the rest through callables: `relaunch(i, duration_s)` starts client i again with a fresh
    one-time token for the rest of the run (a joining site's first start too: its slot holds `NOT_JOINED`
    until then); `blackhole(i, seconds)` cuts its link (and says how many cuts the
    link has begun); `restart_ps()` stops and
    starts the PS. Every fault is said (`event=chaos fault=... client=... t=...`), appended to `log`, and
    counted; a fault on a client that has already finished, left or not joined yet is skipped (and said so,
    not counted). `left` holds the clients stopped for good, whose exit is the intended one.
    """

    def __init__(self, schedule: tuple[Fault, ...], duration_s: float, clients: list[subprocess.Popen],
                 client_ids: list[str], *, relaunch: Callable[[int, float], subprocess.Popen],
                 blackhole: Callable[[int, float], int] | None, restart_ps: Callable[[], None] | None,
                 say: Callable[[str], None], log: Path | None = None, grace_s: float = GRACE_S) -> None:
        self.schedule, self.duration_s = schedule, duration_s
        self.clients, self.client_ids = clients, client_ids
        self._relaunch, self._blackhole, self._restart_ps = relaunch, blackhole, restart_ps
        self._say, self._log, self.grace_s = say, log, grace_s
        self._next = 0
        self.counts = dict.fromkeys(KINDS, 0)
        self.left: set[int] = set()

    @property
    def enabled(self) -> bool:
        return True

    def tick(self, elapsed_s: float) -> None:
        """Do every fault due by `elapsed_s` (seconds since the run started) that is not done yet."""
        while self._next < len(self.schedule) and self.schedule[self._next].at_s <= elapsed_s:
            fault = self.schedule[self._next]
            self._next += 1
            self._do(fault, elapsed_s)

    def summary(self) -> str:
        """`chaos: N preemptions, M kills, K flaps, R PS restarts` (the faults done)."""
        return "chaos: " + ", ".join(f"{self.counts[k]} {_PLURALS[k]}" for k in KINDS)

    def _do(self, fault: Fault, elapsed_s: float) -> None:
        who = self.client_ids[fault.client] if fault.client is not None else "ps"
        slot = self.clients[fault.client] if fault.client is not None else None
        if slot is not None and (skip := _skip(fault, slot)):
            self._note(f"event=chaos fault={fault.kind} client={who} t={elapsed_s:.1f} skipped={skip}")
            return
        self._note(f"event=chaos fault={fault.kind} client={who} t={elapsed_s:.1f} scheduled_t={fault.at_s:.1f}")
        if fault.kind in ("preempt", "kill"):
            i = fault.client
            sig = signal.SIGTERM if fault.kind == "preempt" else signal.SIGKILL
            code = stop(self.clients[i], sig, self.grace_s)
            remaining = max(self.duration_s - elapsed_s, 1.0)
            self.clients[i] = self._relaunch(i, remaining)
            self._note(f"event=chaos_relaunch client={who} exit_code={code} token=fresh duration_s={remaining:.0f}")
        elif fault.kind == "join":
            remaining = max(self.duration_s - elapsed_s, 1.0)
            self.clients[fault.client] = self._relaunch(fault.client, remaining)
            self._note(f"event=chaos_joined client={who} token=fresh duration_s={remaining:.0f}")
        elif fault.kind == "leave":
            code = stop(self.clients[fault.client], signal.SIGTERM, self.grace_s)
            self.left.add(fault.client)
            self._note(f"event=chaos_left client={who} exit_code={code} relaunch=none")
        elif fault.kind == "flap" and self._blackhole is not None:
            cuts = self._blackhole(fault.client, FLAP_S)
            self._note(f"event=chaos_link_cut client={who} seconds={FLAP_S:g} link_blackholes={cuts}")
        elif fault.kind == "ps-restart" and self._restart_ps is not None:
            t = time.monotonic()
            self._restart_ps()
            self._note(f"event=chaos_ps_restarted down_s={time.monotonic() - t:.1f}")
        self.counts[fault.kind] += 1

    def _note(self, line: str) -> None:
        self._say(line)
        if self._log is not None:
            with open(self._log, "a") as f:
                f.write(line + "\n")


def _skip(fault: Fault, slot: subprocess.Popen | _NotJoined) -> str | None:
    """Why a client fault cannot be done on the client in `slot`, or None."""
    if slot is NOT_JOINED:
        return None if fault.kind == "join" else "not_joined"
    return "client_exited" if slot.poll() is not None else None


class _NotJoined:
    """The slot of a client whose site joins mid-run, until it does: no process yet, so none to wait for,
    signal or count as failed; `poll()` says it is still to come."""

    returncode = None

    def poll(self) -> None:
        return None


NOT_JOINED = _NotJoined()


class _NoChaos:
    """The null `ChaosRunner` of a run without `--chaos`."""

    enabled = False
    left: frozenset[int] = frozenset()

    def tick(self, elapsed_s: float) -> None:
        return None

    def summary(self) -> str:
        return "chaos: off"


NO_CHAOS = _NoChaos()
