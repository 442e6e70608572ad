"""`geofed local --link`: each client's own emulated link, its bytes counted at the socket per round."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from wan_helpers import LoopbackServer, echo

from geofed_apps.links import ClientLinks
from geofed_apps.wan import LinkProfile

GEOFED = str(Path(sys.executable).with_name("geofed"))


def _exchange(conn: socket.socket, n: int) -> None:
    conn.sendall(b"x" * n)
    got = 0
    while got < n:
        got += len(conn.recv(1 << 16))


def _settled(links: ClientLinks, client: str, total: int) -> None:
    deadline = time.monotonic() + 10
    while links.stats(client) != (total, total):
        assert time.monotonic() < deadline, "the link did not carry the bytes"
        time.sleep(0.01)


def test_records_carry_the_links_counts_at_the_time_they_were_written_and_the_summary_gives_bytes_per_round():
    server = LoopbackServer(echo)
    links = ClientLinks(LinkProfile.parse("0ms"))
    try:
        host, _, port = links.address("site.a", f"127.0.0.1:{server.port}").rpartition(":")
        conn = socket.create_connection((host, int(port)))
        written, sent = [], 0
        for n in (5000, 300, 700, 2000):  # the first stands for Join and the first whole model
            _exchange(conn, n)
            sent += n
            _settled(links, "site.a", sent)
            written.append({"client": "site.a", "round": len(written), "t": time.time()})
        conn.close()
        records = [links.annotate(r) for r in written]  # read afterwards, as the launcher reads them
        untouched = links.annotate({"client": "site.b", "round": 0, "t": time.time()})

        assert [r["link_up_bytes"] for r in records] == [5000, 5300, 6000, 8000]
        assert [r["link_down_bytes"] for r in records] == [5000, 5300, 6000, 8000]  # echoed
        assert "link_up_bytes" not in untouched
        summary = links.summary(records)
        assert "up 1000 B, down 1000 B (mean over 1 clients, 3 rounds)" in summary, summary
        assert "8000 B up, 8000 B down in all" in summary
    finally:
        links.stop()
        server.close()


def test_a_link_profile_geofed_wan_cannot_read_is_refused_before_anything_starts(tmp_path):
    out = subprocess.run([GEOFED, "local", "--link", "50xs", "--run-dir", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=60)

    assert out.returncode == 2
    assert re.search(r"^geofed local: --link: .*'50xs'", out.stderr, re.M), out.stderr
    assert not (tmp_path / "runs").exists()
