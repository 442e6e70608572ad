"""A disk that fills up on demand under the PS's checkpoint directory.

Preferred: a real small tmpfs (`mount -t tmpfs -o size=...`, needs root/CAP_SYS_ADMIN), filled with a
ballast file until ENOSPC, exactly what a full volume does. Where mounting is not allowed, the honest
fallback is the PS's own RLIMIT_FSIZE lowered below one checkpoint (via prlimit on its pid): every
write past the limit then fails with EFBIG, the same OSError path in `CheckpointStore.save`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import psutil

_FILL = 1 << 20


class SmallDisk:
    """`path` becomes a `size_bytes` filesystem if possible; `fill()` / `free()` switch "full" on and off."""

    def __init__(self, path: Path, size_bytes: int, reaper) -> None:
        self.path, self.size = path, size_bytes
        path.mkdir(parents=True, exist_ok=True)
        self.method = "tmpfs" if self._mount(reaper) else "rlimit"
        self._ballast = path / "ballast.bin"
        self._pid: int | None = None
        self._saved_limit: tuple[int, int] | None = None

    def _mount(self, reaper) -> bool:
        try:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0700", "tmpfs",
                                str(self.path)], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return False
        if r.returncode != 0:
            return False
        reaper.add(lambda: subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=10))
        return True

    @property
    def description(self) -> str:
        if self.method == "tmpfs":
            return f"checkpoint dir on a {self.size >> 20} MiB tmpfs, filled to ENOSPC with a ballast file"
        return "RLIMIT_FSIZE of the PS lowered below one checkpoint (EFBIG; mounting a tmpfs was not permitted)"

    def fill(self, ps_pid: int, limit_bytes: int) -> None:
        """Make the next checkpoint fail: fill the tmpfs, or cap the PS's file size at `limit_bytes`."""
        if self.method == "tmpfs":
            block = b"\0" * _FILL
            with open(self._ballast, "wb", buffering=0) as f:
                while True:
                    try:
                        f.write(block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
            return
        proc = psutil.Process(ps_pid)
        self._pid, self._saved_limit = ps_pid, proc.rlimit(psutil.RLIMIT_FSIZE)
        proc.rlimit(psutil.RLIMIT_FSIZE, (limit_bytes, self._saved_limit[1]))

    def free(self) -> None:
        """Space again: drop the ballast, or restore the PS's file-size limit."""
        if self.method == "tmpfs":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._ballast)
            return
        if self._pid is not None and self._saved_limit is not None:
            psutil.Process(self._pid).rlimit(psutil.RLIMIT_FSIZE, self._saved_limit)
