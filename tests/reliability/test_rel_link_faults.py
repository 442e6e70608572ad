"""WAN link resets mid-download and between a push and its receipt (issue 5, item 1)."""

from __future__ import annotations

from geofed_testing.reliability.link_faults import link_reset_mid_download, receipt_lost_to_reset


def test_link_reset_mid_download_resumes_instead_of_restarting(tmp_path, reaper):
    result = link_reset_mid_download(tmp_path, reaper)

    assert result.details["model_resumes"] >= 1
    assert result.details["bytes_received"] < 2 * result.details["model_bytes"]
    print(f"{result.name}: {result.outcome}; {result.resume_s:.2f} s from reset to full model")


def test_receipt_lost_to_a_reset_is_retransmitted_and_applied_once(tmp_path, reaper):
    result = receipt_lost_to_reset(tmp_path, reaper)

    assert result.lost == 0 and result.twice == 0
    assert result.details["status"] == "DUPLICATE"
