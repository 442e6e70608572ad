"""What the kubelet's tests share: a node directory other users can traverse, the markers, a PVC."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..emulator import GeofedEmulator

NS = "default"
pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=GeofedEmulator), pytest.mark.timeout(120)]


@pytest.fixture()
def node_root() -> Iterator[Path]:
    """A node directory pods running as other users can reach (pytest's tmp_path is private to root)."""
    with tempfile.TemporaryDirectory(prefix="kubelet-") as root:
        yield Path(root)


def claim(name: str) -> dict[str, Any]:
    """A 1 GiB ReadWriteOnce PVC in the test namespace."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
