"""Load: at least 64 concurrent clients pushing int8+Huffman deltas at one PS (issue 5, item 2)."""

from __future__ import annotations

import pytest

from geofed_testing.reliability.load import run_load


def _assert_nothing_lost(result) -> None:
    assert not result.errors, result.errors[:5]
    assert result.pushes > 0
    assert result.lost == 0 and result.double_counted == 0, (result.version, result.pushes)
    assert result.exact, f"model differs from Σ receipts·δ by up to {result.max_abs_error}"
    assert result.ledger_ok, "the PS's per-client push counts differ from the clients' receipts"


def test_64_clients_for_10_seconds_lose_and_double_count_nothing(tmp_path, reaper):
    result = run_load(tmp_path, reaper, clients=64, seconds=10.0)

    _assert_nothing_lost(result)
    print(f"\nload: {result.clients} clients, {result.pushes} pushes in {result.seconds:.1f} s = "
          f"{result.pushes_per_s:.1f}/s, p50 {result.p50_ms:.0f} ms, p99 {result.p99_ms:.0f} ms, "
          f"PS RSS {result.rss_start_mb:.0f} -> peak {result.rss_peak_mb:.0f} MB, {result.payload_bytes / 1e3:.1f} kB "
          f"per push ({result.codec})")


@pytest.mark.slow
def test_128_clients_for_2_minutes_lose_and_double_count_nothing(tmp_path, reaper):
    result = run_load(tmp_path, reaper, clients=128, seconds=120.0)

    _assert_nothing_lost(result)
    first, last = result.per_second[5:15], result.per_second[-11:-1]
    print(f"\nload: {result.row()}\nreceipts/s first {first} last {last}")


def test_checkpoint_size_does_not_grow_with_push_history(tmp_path, reaper):
    """The PS checkpoints after every version; what it writes must scale with the model and the clients,
    not with every push it ever received, or the per-version cost (taken under the aggregator lock) grows
    until throughput collapses (measured: 6 ms per checkpoint with no history, 544 ms with 100k upload ids)."""
    numel, clients = 1000, 32
    result = run_load(tmp_path, reaper, clients=clients, seconds=8.0, numel=numel)
    _assert_nothing_lost(result)
    newest = max((tmp_path / "ps" / "ckpt").glob("ps-v*"), key=lambda p: p.stat().st_mtime)
    # Per client: its rejoin-token hash, ledger entry and last few upload ids (~1 kB), never its history.
    bound = 4 * numel + 8192 + 1024 * clients

    assert newest.stat().st_size <= bound, (
        f"{newest.name} is {newest.stat().st_size} bytes after {result.pushes} pushes (bound {bound}): "
        "ps_server/aggregation/aggregator.py Aggregator.state_dict writes every remembered upload id (up to 100k) into "
        "each checkpoint"
    )
