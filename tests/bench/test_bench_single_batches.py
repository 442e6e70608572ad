"""Reference (c)'s batches and the reference runner's argument checks (bench/federation/single.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.federation.single import PerClientStream, main
from client_agent.data import TokenStream


def shard(value: int) -> TokenStream:
    """A shard whose every token is `value`, so a row tells which shard it came from."""
    return TokenStream(np.full(4000, value, dtype=np.int64), block_size=8, seed=value)


def test_per_client_batches_take_an_equal_share_from_each_shard():
    stream = PerClientStream([shard(1), shard(2), shard(3)])
    for _ in range(3):
        batch = stream.next_batch(7)
        assert tuple(batch.shape) == (7, 9)
        assert batch[:, 0].tolist() == [1, 1, 1, 2, 2, 3, 3]


def test_per_client_batches_advance_each_shard_as_its_own_stream_would():
    stream, alone = PerClientStream([shard(1), shard(2)]), shard(1)
    stream.next_batch(4)
    alone.next_batch(2)
    assert stream.state_dict()["shards"][0] == alone.state_dict()


def test_a_per_client_batch_smaller_than_the_shard_count_is_refused():
    with pytest.raises(ValueError, match="a per-client batch needs >= 3 rows"):
        PerClientStream([shard(1), shard(2), shard(3)]).next_batch(2)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--per-client", "--batch-size", "1"], "--batch-size must be >= 2, got 1"),
        (["--lr", "0"], "--lr must lie in (0, 1), got 0.0"),
    ],
)
def test_bad_reference_arguments_fail_before_any_training(tmp_path, capsys, extra, message):
    argv = ["--federation", str(tmp_path / "f.yaml"), "--data", "a.list", "b.list", "--eval-list", "e.list",
            "--tokens", "100", "--out", str(tmp_path / "c.jsonl"), "--work", str(tmp_path), *extra]  # fmt: skip
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.jsonl").exists()
