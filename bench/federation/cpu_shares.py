"""A fixed CPU share per benchmark process, so emulated sites behave like separate machines.

Four clients and the PS on two shared cores lend each other their cores: a synchronous client waiting for
the others' deltas gives its core to their compute, which a real site cannot do. With shares on, each
process (every client and the PS) runs in its own group of the cgroup v1 `cpu` controller,
`<root>/geofed-bench-<run>-<name>/`, whose CFS quota (`cpu.cfs_quota_us` per `cpu.cfs_period_us`) caps it
at `cpus` CPUs whether or not the others are busy. A process is moved by writing its pid to the group's
`cgroup.procs` (its threads and later children follow); groups are removed when the run ends.

Needs the v1 `cpu` controller mounted at `/sys/fs/cgroup/cpu` and write access to it (root). Off by
default: `CpuShares(None)` is a null object whose `place` and `close` do nothing.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000  # 100 ms, the kernel's default CFS period
PREFIX = "geofed-bench"


class CpuShareError(RuntimeError):
    """The CPU shares cannot be set up here; the message says what is missing."""


def check_controller(root: Path = CGROUP_CPU) -> None:
    """Raise CpuShareError unless `root` is a writable cgroup v1 `cpu` controller."""
    if not (root / "cpu.cfs_quota_us").is_file():
        raise CpuShareError(
            f"no cgroup v1 cpu controller at {root} (no cpu.cfs_quota_us there): per-process CPU shares "
            "need it mounted; run without --cpu-share"
        )
    probe = root / f"{PREFIX}-probe"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as exc:
        raise CpuShareError(
            f"cannot create a group under {root} ({exc.strerror}): per-process CPU shares need write "
            "access to the cpu controller (root); run without --cpu-share"
        ) from None


class CpuShares:
    """One cgroup per named process of one run, each capped at `cpus` CPUs; `cpus=None` turns it off."""

    def __init__(self, run: str, cpus: float | None, root: Path = CGROUP_CPU) -> None:
        if cpus is not None and not 0.01 <= cpus <= 64:
            raise CpuShareError(f"a CPU share must lie in [0.01, 64] CPUs, got {cpus}")
        self.run = re.sub(r"[^A-Za-z0-9_.-]", "-", run)
        self.cpus, self.root = cpus, root
        self.groups: dict[str, Path] = {}
        if self.enabled:
            check_controller(root)

    @property
    def enabled(self) -> bool:
        return self.cpus is not None

    def group(self, name: str) -> Path:
        """The group directory of process `name` in this run."""
        return self.root / f"{PREFIX}-{self.run}-{re.sub(r'[^A-Za-z0-9_.-]', '-', name)}"

    def place(self, name: str, pid: int) -> Path | None:
        """Create `name`'s group with its quota and move process `pid` (with its threads) into it."""
        if not self.enabled:
            return None
        path = self.group(name)
        try:
            path.mkdir(exist_ok=False)
            self.groups[name] = path
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(max(1000, round(self.cpus * PERIOD_US))))
            (path / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise CpuShareError(f"cannot put {name} (pid {pid}) in {path}: {exc.strerror or exc}") from None
        return path

    def close(self) -> None:
        """Move anything left in this run's groups back to the root group and remove the groups."""
        for name, path in list(self.groups.items()):
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.root / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                path.rmdir()
            if not path.exists():
                del self.groups[name]


def describe_share(cpus: float | None) -> str:
    """How a run's processes got their CPU, for the tables."""
    if cpus is None:
        return "processes shared the machine's cores (a waiting client's core is lent to the others)"
    return f"each client and the PS capped at {cpus:g} CPU in its own cgroup (cpu.cfs_quota_us)"
