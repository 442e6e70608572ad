"""The rejoin token a Join returns, kept in the client's state directory (mode 0600) for its next Join."""

from __future__ import annotations

import os
from pathlib import Path


class RejoinToken:
    """The saved rejoin token of one client; nothing is kept without a state directory."""

    def __init__(self, state_dir: str | Path | None) -> None:
        self.path = Path(state_dir) / "rejoin.token" if state_dir else None
        self.token = self._load()

    def _load(self) -> str | None:
        if self.path and self.path.exists():
            return self.path.read_text().strip() or None
        return None

    def save(self, token: str) -> None:
        """Keep `token` (atomically replacing the last one)."""
        self.token = token
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        os.replace(tmp, self.path)
