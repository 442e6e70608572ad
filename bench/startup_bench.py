"""Start-up of `geofed local` (the default model, the `make demo` federation), broken down by phase.

Each try runs `python -m geofed_apps local --duration D --quiet` and, while it runs, notes every client process
the launcher starts (its start time from /proc, 10 ms resolution). Afterwards each client's log gives the
seconds from that process's start to its events: `event=agent_started` (the agent's code imported and its
settings read), `event=settings_checked` (tokenizer, data and device checked against the federation, before
Join), `event=joined`, `event=model_built`, the first `event=model_received` (the global model streamed in)
and `event=first_step`. Events the measured code does not log are left out of its rows. One JSON line per
try and client goes to `--out` with the load average and the commit.

Usage: .venv/bin/python bench/startup_bench.py --tries 3 --label after --out bench/results/startup/after.jsonl
       (PYTHONPATH=/other/checkout measures that checkout's code with this script)
       .venv/bin/python bench/startup_bench.py --table FILE...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: the code measured may be another checkout's

from bench.rejoin_bench import _commit  # noqa: E402

EVENTS = ("agent_started", "settings_checked", "joined", "model_built", "model_received", "first_step")
_TS = re.compile(r"^ts=(\S+ \S+) level=\S+ logger=\S+ event=(\w+)(.*)$", re.M)


def _process_start_wall(pid: int) -> float | None:
    """Wall-clock start of a live process: its start tick (since boot) against /proc/uptime, ±10 ms."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _client_id(pid: int) -> str | None:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for i, a in enumerate(args[:-1]):
        if a == b"--client-id":
            return args[i + 1].decode()
    return None


def client_phases(log_text: str, t_start: float) -> dict:
    """Seconds from the client process's start to the first occurrence of each event in its log."""
    out: dict = {}
    for ts, event, _ in _TS.findall(log_text):
        key = f"t_{event}_s"
        if event in EVENTS and key not in out:
            out[key] = round(datetime.strptime(ts, "%Y-%m-%d %H:%M:%S,%f").timestamp() - t_start, 3)
    return out


def run_once(duration_s: float, label: str, attempt: int) -> list[dict]:
    runs = Path(tempfile.mkdtemp(prefix="geofed-startup-"))
    load = os.getloadavg()
    t_launch = time.time()
    cmd = [
        sys.executable,
        "-m",
        "geofed_apps",
        "local",
        "--duration",
        str(duration_s),
        "--quiet",
        "--run-dir",
        str(runs),
    ]
    # cwd: `python -m` puts the working directory first on sys.path, ahead of a PYTHONPATH naming other code.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=runs)
    starts: dict[str, float] = {}
    while proc.poll() is None:
        for child in _children(proc.pid):
            cid = _client_id(child)
            if cid and cid not in starts and (at := _process_start_wall(child)) is not None:
                starts[cid] = at
        time.sleep(0.01)
    output = proc.stdout.read() if proc.stdout else ""
    run = next(p for p in runs.iterdir() if p.is_dir() and p.name[:8].isdigit())
    rows = []
    for cid, t0 in sorted(starts.items()):
        log = run / "logs" / f"client-{cid.rsplit('-', 1)[1]}.log"
        rows.append({
            "label": label, "try": attempt, "client": cid, "launcher_to_process_s": round(t0 - t_launch, 3),
            **client_phases(log.read_text(), t0), "exit": proc.returncode, "final": output.strip().splitlines()[-4:],
            "loadavg_at_start": load, "loadavg_at_end": os.getloadavg(), "commit": _commit(),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })  # fmt: skip
    shutil.rmtree(runs, ignore_errors=True)  # the rows keep what was measured; the run's model and logs go
    return rows


def _spread(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def table(rows: list[dict]) -> str:
    """One line per label: median (range) over every client of every try, of the seconds from each client
    process's start to each event; '–' where the code measured does not log the event."""
    cols = [f"t_{e}_s" for e in EVENTS]
    out = [
        "| code | tries × clients | agent started (imports, settings) | settings checked | joined | model built "
        "| model received | first step | launcher → client process | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['label']} ({r['commit']})", []).append(r)
    for name, rs in groups.items():
        cells = [_spread([r[c] for r in rs if c in r]) for c in cols]
        loads = [r["loadavg_at_start"][0] for r in rs]
        tries = len({r["final"][-1] for r in rs})  # the run directory line: one per try
        out.append(
            f"| {name} | {tries} × {len(rs) // max(1, tries)} | "
            + " | ".join(cells)
            + f" | {_spread([r['launcher_to_process_s'] for r in rs])} | {min(loads):.2f}–{max(loads):.2f} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--duration", type=float, default=15.0, help="seconds of training per try")
    p.add_argument("--label", default="")
    p.add_argument("--out", type=Path)
    p.add_argument("--table", nargs="+", type=Path)
    args = p.parse_args()
    if args.table:
        print(table([json.loads(line) for f in args.table for line in f.read_text().splitlines() if line]))
        return 0
    for attempt in range(args.tries):
        for row in run_once(args.duration, args.label, attempt):
            print(json.dumps(row), flush=True)
            if args.out is not None:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
