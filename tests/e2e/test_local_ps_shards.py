"""`geofed local --ps-shards 2`: a front and two shard processes; the model learns like the single-PS default."""

from __future__ import annotations

import numpy as np
import pytest

from geofed_apps.shards import newest_sharded
from geofed_testing.local_run import run_local
from ps_server.checkpoint import CheckpointStore


@pytest.mark.slow  # ~60 s on 2 cores; tests/reliability/test_rel_ps_shards.py covers the wire in the default suite
def test_two_ps_shards_learn_and_hold_one_slice_each(tmp_path):
    out = run_local(tmp_path, "--clients", "2", "--ps-shards", "2", "--duration", "30")
    assert out.first_loss is not None, out.stdout[-2000:]
    assert out.first_loss - out.last_loss > 1.0
    run = out.run_dir
    shards = [CheckpointStore(run / "ps" / f"shard-{i}" / "ckpt").load_latest() for i in range(2)]
    assert shards[0].version == shards[1].version >= 3  # the same committed version on both
    assert shards[0].aggregator["hi"] == shards[1].aggregator["lo"]  # adjacent slices ...
    whole = newest_sharded([run / "ps" / f"shard-{i}" / "ckpt" for i in range(2)])
    assert whole.flat.size == shards[0].flat.size + shards[1].flat.size  # ... that make up the model
    assert np.isfinite(whole.flat).all()
    assert "event=shard_listening" in (run / "logs" / "ps-shard-1.log").read_text()
