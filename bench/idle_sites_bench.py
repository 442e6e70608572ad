"""How long a sync round is held by sites that joined and never train, over the wire against a real `geofed ps`.

A sync PS with default settings (straggler timeout 120 s, session TTL 300 s, so clients heartbeat every 15 s);
three idle sites join and heartbeat every 15 s, as a running client does, but never train; one training client
joins with them, heartbeats with its round's progress and pushes a delta at once, two rounds in a row. Each
round's time is measured at the training client: from its push being accepted to the next version arriving over
its model stream. The PS's `event=round_not_waiting` lines go into the output beside it.

Each round is one JSON line in `--out` (kept under bench/results/idle-sites/): the label, commit, round, seconds
from the first delta to the close, the version, the 1-minute load average.

Usage: python bench/idle_sites_bench.py --label after --out bench/results/idle-sites/after.jsonl
       (the code before: PYTHONPATH=<export of the earlier commit> python bench/idle_sites_bench.py --commit C ...)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # geofed_testing is not installed: it runs from the checkout

import geofed  # noqa: E402
from geofed.protocol import geofed_pb2 as pb  # noqa: E402
from geofed.protocol import geofed_pb2_grpc as pb_grpc  # noqa: E402
from geofed.protocol.auth import bearer  # noqa: E402
from geofed_testing.ledger import delta_for  # noqa: E402
from geofed_testing.procs import PSNode, Reaper  # noqa: E402
from geofed_testing.wire import NUMEL, init_model, join, mint, push  # noqa: E402

IDLE_SITES = 3
HEARTBEAT_S = 15.0  # a running client's heartbeat with the default 300 s session TTL
ROUNDS = 2


def commit() -> str:
    """The commit of the code measured: that of the checkout `geofed` is imported from."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(geofed.__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def idle_site(ps: PSNode, i: int, stop: threading.Event) -> threading.Thread:
    """A site whose client joins and heartbeats every 15 s with an empty report, and never trains."""
    client_id = f"idle{i}.gpu0"
    stub = pb_grpc.ParameterServerStub(ps.channel())
    session = stub.Join(pb.JoinRequest(token=mint(ps, client_id, site=f"idle{i}"), client_id=client_id),
                        timeout=30).session

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            stub.Heartbeat(pb.HeartbeatRequest(report=pb.ClientReport()), metadata=bearer(session), timeout=30)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    return thread


def run(label: str, out: Path, code: str) -> list[dict]:
    rows = []
    with Reaper() as reaper, tempfile.TemporaryDirectory(prefix="idle-sites-") as tmp:
        ps = PSNode(Path(tmp) / "ps", {"aggregation": {"mode": "sync"}})
        reaper.add(ps.kill)
        ps.start()
        init_model(join(ps, "boot.master", master=True, start=False, reaper=reaper))
        stop = threading.Event()
        reaper.add(stop.set)
        idle = [idle_site(ps, i, stop) for i in range(IDLE_SITES)]
        trainer = join(ps, "train.gpu0", site="train", reaper=reaper)
        version = trainer.wait_for_version(0, timeout=60).version
        for r in range(1, ROUNDS + 1):
            progress = getattr(trainer, "progress", None)  # absent from the code before heartbeats carried it
            if progress is not None:
                progress.start(version, lambda: 8, 8 * 128)
            receipt = push(trainer, version, delta_for(f"train/{r}", NUMEL), tokens=8 * 128, local_steps=8)
            t0 = time.monotonic()
            got = trainer.wait_for_version(version, timeout=600)
            closed_s = time.monotonic() - t0
            row = {"label": label, "commit": code, "round": r, "push": receipt.status, "idle_sites": IDLE_SITES,
                   "first_delta_to_close_s": round(closed_s, 2), "version": got.version if got else None,
                   "load_1m": os.getloadavg()[0]}
            rows.append(row)
            print(json.dumps(row), flush=True)
            version = got.version if got else version
        row = {"label": label, "ps_log": re.findall(r"event=round_not_waiting .*", ps.logs())}
        rows.append(row)
        print(json.dumps(row), flush=True)
        stop.set()
        for t in idle:
            t.join(timeout=HEARTBEAT_S + 30)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", help="the commit measured, where the code is not a git checkout")
    args = parser.parse_args()
    run(args.label, args.out, args.commit or commit())


if __name__ == "__main__":
    main()
