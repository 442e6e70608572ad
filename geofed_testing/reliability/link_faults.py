"""WAN faults through the user-space emulator (paper §I: transfers break mid-flight; §III-B4: retransmit):
a link reset in the middle of a model download, and a reset that eats a push's receipt.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from geofed_apps.launch import wait_until
from geofed_apps.wan import LinkProfile, WanProxy
from geofed_testing.ledger import delta_for
from geofed_testing.procs import Reaper
from geofed_testing.wire import join, push

from .scenario import Federation, ScenarioResult


def _proxy(reaper: Reaper, port: int, profile: LinkProfile) -> WanProxy:
    proxy = WanProxy("127.0.0.1", port, profile)
    proxy.start()
    reaper.add(proxy.stop)
    return proxy


def link_reset_mid_download(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """A TCP reset at ~40% of a 4 MB model download: the client resumes at the byte it reached."""
    numel = 1 << 20
    model_bytes = 4 * numel
    res = ScenarioResult("link reset mid-download", "TCP RST of the client's connection at ~40% of a 4 MB "
                         "model download (2 MB/s link)")
    fed = Federation.start(workdir, reaper, numel, extra=["--chunk-bytes", "65536"])
    proxy = _proxy(reaper, fed.ps.port, LinkProfile(down_bytes_per_s=2_000_000))
    c = join(fed.ps, "dl.c0", address=f"127.0.0.1:{proxy.port}", reaper=reaper)
    wait_until(lambda: proxy.stats.bytes_down > 0.4 * model_bytes, 30, "40% downloaded", period=0.005)
    res.check(c.latest() is None, "reset lands before the download completes")
    t_reset = time.monotonic()
    proxy.trigger_reset()
    got = c.wait_for_version(0, timeout=60)
    res.resume_s = time.monotonic() - t_reset
    res.check(got is not None and got.version == 1, "the model arrives", got and got.version)
    res.check(np.array_equal(got.flat, fed.theta0), "bit-exact model (sha256 verified by the client)")
    res.check(c.model_resumes >= 1, "the transfer resumed (PSClient.model_resumes)", c.model_resumes)
    res.check(c.bytes_received < 2 * model_bytes, "bytes received < 2x the model (no restart from zero)",
              c.bytes_received)
    res.details.update(model_resumes=c.model_resumes, bytes_received=c.bytes_received, model_bytes=model_bytes,
                       resets=proxy.stats.resets, version=1)
    res.outcome = (f"resumed {c.model_resumes}x; received {c.bytes_received / model_bytes:.2f}x the model "
                   f"({c.bytes_received - model_bytes} bytes re-sent)")
    return res


def receipt_lost_to_reset(workdir: Path, reaper: Reaper) -> ScenarioResult:
    """The PS applies a push, then the link resets before its receipt arrives: the retransmission (same
    upload id) must be answered DUPLICATE, and the delta counted once."""
    numel = 100_000
    res = ScenarioResult("push receipt lost to a reset", "TCP RST after the PS applied a push but before its "
                         "receipt crossed the link (400 ms one-way latency)")
    fed = Federation.start(workdir, reaper, numel)
    proxy = _proxy(reaper, fed.ps.port, LinkProfile(latency_ms=400))
    c = join(fed.ps, "rcpt.c0", address=f"127.0.0.1:{proxy.port}", reaper=reaper, start=False)
    reset_at: list[float] = []

    def cut_when_applied() -> None:
        wait_until(lambda: "event=push client=rcpt.c0 " in fed.ps.logs(), 60, "the PS applying the push",
                   period=0.002)
        reset_at.append(time.monotonic())
        proxy.trigger_reset()

    cutter = threading.Thread(target=cut_when_applied, daemon=True)
    cutter.start()
    tag = "rcpt/0"
    receipt = push(c, 1, delta_for(tag, numel))
    cutter.join(5)
    res.check(bool(reset_at), "reset fired after the PS logged the push")
    res.resume_s = time.monotonic() - reset_at[0]
    res.details.update(status=receipt.status, attempts=receipt.attempts)
    res.check(receipt.attempts >= 2 and receipt.status == "DUPLICATE",
              "the retransmission was answered DUPLICATE (same upload id)", receipt)
    fed.ledger({tag}, {tag}, res)
    res.outcome = f"retransmitted on attempt {receipt.attempts}, answered DUPLICATE, applied once"
    return res


SCENARIOS = {
    "link_reset_download": link_reset_mid_download,
    "receipt_lost": receipt_lost_to_reset,
}
