"""Start one `geofed ps` per PS group of a multi-PS federation on this machine (paper §III-B1c).

The PSs dial each other for the ring all-reduce, so each gets a fixed free port up front, written into
the federation's `groups` as its address, and all share one peer secret (a 0600 file). `geofed local
--ps-groups N`, the benchmarks and the tests start groups through here.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import yaml

from .launch import PSProcess, free_port, write_token
from .shards import ShardedPS

__all__ = ["LocalPSSet", "PSGroupProcesses", "free_port", "group_names", "with_groups"]


def group_names(n: int) -> list[str]:
    """`g0`, `g1`, … (names sort in ring order)."""
    return [f"g{i}" for i in range(n)]


def with_groups(federation: dict, names: list[str], ports: dict[str, int]) -> dict:
    """The federation settings with `groups` naming each PS's 127.0.0.1 address."""
    return {**federation, "groups": [{"name": g, "address": f"127.0.0.1:{ports[g]}"} for g in names]}


class PSGroupProcesses:
    """One `PSProcess` per group, in `workdir/<group>/`, sharing `workdir/peer.token`.

    `route` points the PSs at something in between (a WAN emulator) instead of at each other directly;
    clients dial `ps[group].address`.
    """

    def __init__(self, workdir: Path, federation: dict, n_groups: int, *, extra: list[str] | None = None,
                 ps_class: type[PSProcess] = PSProcess,
                 **ps_options) -> None:
        self.dir = workdir
        self.names = group_names(n_groups)
        self.ports = {g: free_port() for g in self.names}
        self.peer_token = write_token(workdir / "peer.token", "peer-" + secrets.token_urlsafe(32))
        self.federation = with_groups(federation, self.names, self.ports)
        self.fed_file = workdir / "federation.yaml"
        self.fed_file.parent.mkdir(parents=True, exist_ok=True)
        self.fed_file.write_text(yaml.safe_dump(self.federation, sort_keys=False))
        self.ps: dict[str, PSProcess] = {}
        for g in self.names:
            ps = ps_class(workdir / g, self.fed_file, extra=[
                "--group", g, "--peer-token-file", str(self.peer_token), *(extra or []),
            ], **ps_options)  # fmt: skip
            ps.port = self.ports[g]
            self.ps[g] = ps

    def route(self, addresses: dict[str, str]) -> None:
        """Make the PSs dial each other at `addresses` (group -> host:port) instead; before `start`."""
        self.federation["groups"] = [{"name": g, "address": addresses.get(g, f"127.0.0.1:{self.ports[g]}")}
                                     for g in self.names]
        self.fed_file.write_text(yaml.safe_dump(self.federation, sort_keys=False))

    def start(self, timeout: float = 60.0) -> PSGroupProcesses:
        for ps in self.ps.values():
            ps.start(timeout)
        return self

    def __iter__(self):
        return iter(self.ps.values())

    def __getitem__(self, group: str) -> PSProcess:
        return self.ps[group]


class LocalPSSet:
    """The PS side of `geofed local`: one PS, or with `groups` > 1 one PS per group (clients round-robin).

    `primary` is the PS whose checkpoints the launcher evaluates (every group's PS holds the same model).
    """

    def __init__(self, run: Path, fed_file: Path, logs: Path, groups: int = 1, shards: int = 1) -> None:
        self.groups: PSGroupProcesses | None = None
        self.sharded: ShardedPS | None = None
        extra = ["--keep-checkpoints", "2"]
        if shards > 1:  # a sharded PS: the front is the clients' PS, the shards hold the model
            self.sharded = ShardedPS(run / "ps", fed_file, shards, extra=extra, logs=logs)
            self.all = self.sharded.all
        elif groups > 1:
            federation = yaml.safe_load(fed_file.read_text())
            self.groups = PSGroupProcesses(run / "ps", federation, groups, extra=extra)
            for g, ps in self.groups.ps.items():
                ps.log = logs / f"ps-{g}.log"
            self.all = list(self.groups)
        else:
            self.all = [PSProcess(run, fed_file, checkpoint_dir=run / "ps", log=logs / "ps.log", extra=extra)]
        self.primary = self.all[0]
        for ps in self.all if self.sharded is None else [self.primary]:  # status pages, printed by geofed local
            ps.status_port = free_port()

    def start(self) -> None:
        if self.sharded is not None:
            self.sharded.start()
            return
        for ps in self.all:
            ps.start()

    def newest(self):
        """The newest global model on disk (a `PSCheckpoint`), None before Θ0."""
        from .evaluate import newest

        return self.sharded.newest() if self.sharded is not None else newest(self.primary.ckpt_dir)

    def for_client(self, i: int) -> tuple[PSProcess, dict[str, str]]:
        """Client `i`'s PS and the extra client settings (its group)."""
        if self.groups is None:
            return self.primary, {}
        g = self.groups.names[i % len(self.groups.names)]
        return self.groups[g], {"group": g}

    @property
    def procs(self) -> list:
        return [ps.proc for ps in self.all]

    def ring_summary(self) -> str | None:
        """`ring all-reduces: K` (the most any PS committed; each counts the rings it took part in)."""
        if self.groups is None:
            return None
        counts = []
        for ps in self.all:
            try:
                with ps.admin() as admin:
                    counts.append(int(admin.status().get("ring_allreduces", 0)))
            except Exception:  # noqa: BLE001 - a summary line must not fail the run
                continue
        return f"ring all-reduces: {max(counts) if counts else '?'} ({len(self.all)} PS groups)"
