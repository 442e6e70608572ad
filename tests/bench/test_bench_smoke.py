"""The harness end to end with tiny settings: real PS and clients over WAN proxies, then the report.

About 80 s on two busy cores: `ours` on the 2-client `smoke` scenario (10 s budget, one thin link with
a blackhole), the single-process baseline at the same token budget, reference (b)'s learning-rate sweep at
the global batch, then the docs sections and PNGs.
"""

from __future__ import annotations

import pytest

from bench.federation.references import SWEEP_LRS
from bench.federation.report import write_report
from bench.federation.scenario import load_scenario
from bench.federation.suite import run_suite


@pytest.mark.long
def test_smoke_run_produces_curves_accounting_and_report(tmp_path):
    scenario = load_scenario("smoke")
    results = tmp_path / "results"
    lines: list[str] = []
    ours, single, *sweep = run_suite(
        scenario, ["ours", "single", "single-global"], work_root=tmp_path / "runs", results_root=results,
        log=lines.append,
    )  # fmt: skip

    # The global model: Θ0 at t = 0, then versions that learned something, all within the budget.
    assert (ours.curve[0].t, ours.curve[0].version, ours.curve[0].tokens) == (0.0, 1, 0)
    assert len(ours.curve) >= 3 and all(0 <= p.t <= scenario.budget_s for p in ours.curve)
    assert ours.curve[-1].loss < ours.curve[0].loss - 1.0
    assert ours.numel > 100_000 and ours.tokens > 0
    # Both clients synced over their proxies; the thin link carried less up than the fast one.
    fast, thin = ours.clients
    assert fast.syncs >= 1 and thin.syncs >= 1 and fast.codecs == ["int8+huffman"]
    assert fast.bytes_up >= fast.payload_bytes > 0 and thin.bytes_up < fast.bytes_up
    assert fast.bytes_down >= 1_000_000  # at least one fp32 model download
    assert any("blackhole on client-1's link" in line for line in lines)
    # The baseline trained at least as many tokens, indexed by tokens.
    assert single.kind == "single" and single.tokens >= ours.tokens
    assert single.curve[-1].loss < single.curve[0].loss
    # Reference (b): one saved run per swept rate, at twice a client's batch, to the same token budget.
    assert [r.method for r in sweep] == [f"single-global@lr={lr:g}" for lr in SWEEP_LRS]
    # Equal tokens: each run stops at the first whole step at or past the budget, so the two batch sizes
    # end within one global-batch step of each other, in half the optimizer steps.
    global_step_tokens = sweep[0].tokens // sweep[0].curve[-1].version
    assert global_step_tokens == 2 * (single.tokens // single.curve[-1].version)
    assert all(abs(r.tokens - single.tokens) < global_step_tokens for r in sweep)
    assert all(r.curve[-1].version * 2 - single.curve[-1].version in (0, 1) for r in sweep)
    assert min(r.curve[-1].loss for r in sweep) < sweep[0].curve[0].loss

    written = write_report(
        scenario, results_root=results, doc=tmp_path / "benchmarks.md", img_dir=tmp_path / "img"
    )
    text = (tmp_path / "benchmarks.md").read_text()
    assert (
        text.startswith("# Benchmarks")
        and "<!-- federation:begin -->" in text
        and "<!-- ratedist:end -->" in text
    )
    assert (
        "| ours (defaults) |" in text
        and "| single process |" in text
        and "![loss vs time, smoke](img/federation-smoke.png)" in text
    )
    assert "| vs (b) one process, global batch (headline) |" in text and "| kept |" in text
    png = tmp_path / "img" / "federation-smoke.png"
    assert png in written and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
