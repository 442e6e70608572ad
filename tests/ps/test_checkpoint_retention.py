"""Every version the retention policy promises gets its own checkpoint, however quickly versions come (issue 14)."""

from __future__ import annotations

import numpy as np
import pytest

from geofed.config import AggregationConfig, FederationConfig, ServerConfig, TrainingConfig
from ps_server.aggregation.events import VersionApplied
from ps_server.checkpoint import CheckpointStore
from ps_server.core import ParameterServerCore
from ps_server.global_model import TensorEntry
from ps_server.ingest import PushHeader, ReceivedPush

NUMEL = 64


class _Push(ReceivedPush):
    """A received push whose values come from memory (the aggregator only iterates them)."""

    def __init__(self, client: str, values: np.ndarray, base: int, upload: str) -> None:
        self.client_id, self._values, self.numel, self.codec_name = client, values, values.size, "fp32"
        self.norm = float(np.linalg.norm(values))
        self.header = PushHeader(base_version=base, upload_id=upload, codec_header=b"", payload_bytes=0,
                                 num_tokens=1)

    def iter_values(self, max_numel):
        yield 0, self._values

    def close(self):
        pass


def _core(tmp_path, every: int, keep: int) -> ParameterServerCore:
    fed = FederationConfig(
        aggregation=AggregationConfig(mode="async", buffer_size=1, weighting="uniform", global_lr=1.0,
                                      outer_optimizer="fedavg", max_staleness=100),
        training=TrainingConfig(lr=0.01, local_steps=50),
    )
    server = ServerConfig(checkpoint_dir=str(tmp_path / "ckpt"), checkpoint_every=every, keep_checkpoints=keep)
    core = ParameterServerCore(fed, server, admin_credential="x" * 32)
    core.aggregator.restore(1, np.zeros(NUMEL, np.float32), (TensorEntry("w", (NUMEL,), "float32"),), {})
    return core


def _quick_versions(core: ParameterServerCore, n: int) -> dict[int, np.ndarray]:
    """Publish n versions back to back while every pushing thread's after-lock work is held back.

    That is the interleaving of pushes arriving together: the next version is published before the thread
    that published the previous one gets to tell the core it was applied. The held events go out afterwards,
    oldest first.
    """
    held, published = [], {}
    tell_core = core.notify
    core.notify = lambda event: held.append(event) if isinstance(event, VersionApplied) else tell_core(event)
    for i in range(n):
        # each client sends one delta on the version it last saw (one delta per client per base version)
        core.aggregator.submit(_Push(f"c{i}", np.full(NUMEL, 0.001 * (i + 1), np.float32), base=1, upload=f"u{i}"))
        snap = core.model.current()
        published[snap.version] = snap.flat.copy()
    for event in held:
        tell_core(event)
    return published


@pytest.mark.parametrize(("every", "keep", "promised"), [(1, 3, [6, 5, 4]), (2, 2, [6, 4]), (1, 10, [6, 5, 4, 3, 2])])
def test_each_promised_version_of_a_quick_succession_has_its_own_checkpoint(tmp_path, every, keep, promised):
    # Prepare
    core = _core(tmp_path, every, keep)

    # Execute: v2..v6 published back to back
    published = _quick_versions(core, 5)

    # Assert: exactly the promised versions are on disk, each holding the model and ledger of its own version
    store = CheckpointStore(tmp_path / "ckpt", keep=keep)
    on_disk = [CheckpointStore.load(p) for p in store.files()]
    assert [c.version for c in on_disk] == promised
    for ckpt in on_disk:
        assert np.array_equal(ckpt.flat, published[ckpt.version])
        pushes = sum(v["pushes"] for v in ckpt.aggregator["ledger"].values())
        assert pushes == ckpt.version - 1  # the state of that version: one applied push per version after v1
        applied = {u for _, u, status, *_ in ckpt.aggregator["uploads"] if status == "APPLIED"}
        assert applied == {f"u{i}" for i in range(ckpt.version - 1)}


def test_a_sigterm_checkpoint_writes_the_current_version_between_promised_ones(tmp_path):
    core = _core(tmp_path, every=4, keep=3)
    published = _quick_versions(core, 2)  # v2 and v3, neither divisible by 4: no checkpoint yet
    assert CheckpointStore(tmp_path / "ckpt").files() == []

    assert core.checkpoint()

    files = CheckpointStore(tmp_path / "ckpt").files()
    assert [int(p.name[4:16]) for p in files] == [3]
    assert np.array_equal(CheckpointStore.load(files[0]).flat, published[3])
