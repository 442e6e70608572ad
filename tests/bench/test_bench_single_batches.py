"""Reference (c)'s batches and the reference runner's argument checks (bench/federation/single.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.federation.single import PerClientStream, main
from client_agent.data.streams import TokenStream


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


def test_a_later_repeat_of_a_sweep_reruns_the_kept_rate_with_another_batch_order(tmp_path, monkeypatch):
    import bench.federation.suite as suite
    from bench.federation.references import sweep_method
    from bench.federation.results import CurvePoint, RunResult, save
    from bench.federation.scenario import parse_scenario
    from bench.federation.scenarios import LOCAL3

    scenario = parse_scenario(LOCAL3)
    for lr, loss in ((0.001, 1.7), (0.002, 1.6), (0.004, 1.8)):
        curve = [CurvePoint(0, 0, 5.0, 0), CurvePoint(9, 9, loss, 1000)]
        save(RunResult("local3", sweep_method("single-global", lr), "single", 9.0, 0, curve, []), tmp_path)
    calls = []

    def fake_run_single(scenario, fed_file, data, run_dir, budget, *, method, lr, seed, **kw):
        calls.append((method, lr, seed))
        curve = [CurvePoint(0, 0, 5.0, 0), CurvePoint(9, 9, 1.65, 1000)]
        return RunResult("local3", method, "single", 9.0, 0, curve, [])

    monkeypatch.setattr(suite, "run_single", fake_run_single)
    fed_file = tmp_path / "federation.yaml"
    fed_file.write_text("{}\n", encoding="utf-8")
    out = suite._sweep(scenario, "single-global", fed_file, None, tmp_path / "run", 1000, 2, tmp_path, lambda m: None)
    assert calls == [("single-global@lr=0.002", 0.002, 1000)]  # the kept rate only, seeded as repeat 2's clients
    assert [r.repeat for r in out] == [2] and (tmp_path / "local3" / "single-global@lr=0.002.r2.json").is_file()
