"""What `geofed local` says about a client that exited with an error: how it ended and its log's last lines."""

from __future__ import annotations

from geofed_apps.local import _exit_report


def test_a_client_ended_by_a_signal_is_named_with_its_signal_and_its_log_tail(tmp_path):
    log = tmp_path / "client-1.log"
    log.write_text("".join(f"line {i}\n" for i in range(9)))
    report = _exit_report(1, -11, log, lines=3)
    assert report.splitlines() == ["client-1 exited with signal SIGSEGV; its log ends:",
                                   "    line 6", "    line 7", "    line 8"]  # fmt: skip


def test_an_exit_code_and_a_missing_log_are_reported_as_such(tmp_path):
    report = _exit_report(0, 3, tmp_path / "absent.log")
    assert report.startswith("client-0 exited with code 3; its log ends:\n    (its log cannot be read: ")
    assert "absent.log" in report
