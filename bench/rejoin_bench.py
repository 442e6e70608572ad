"""Time from client process start to its first training step after a rejoin (issue 3's target: < 3 s
for a 124M-parameter model on loopback; the paper reports about 10 s).

A master client trains one round and is SIGKILLed; a relaunch with a fresh one-time token then Joins,
fetches the global model over StreamModel, restores its optimizer state and data position from its
own checkpoint, and starts training. Measured warm (checkpoint in the page cache) and cold (page cache
dropped first; needs root).

Usage: .venv/bin/python bench/rejoin_bench.py [--preset gpt2-124m] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from client_agent.corpus import stdlib_split, write_file_list
from geofed.protocol.admin_client import AdminClient
from geofed_apps.launch import PSProcess, start_client, stop, wait_until

PRESETS = {
    "gpt2-124m": {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 256},
    "small": {"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 128},
}


def _wait_for(path: Path, pattern: str, timeout: float, proc: subprocess.Popen) -> re.Match:
    """The first match of `pattern` in the client's log, polled every 20 ms."""
    rx = re.compile(pattern)
    return wait_until(lambda: path.exists() and rx.search(path.read_text()), timeout, f"{pattern!r} in {path}",
                      period=0.02, dead=lambda: None if proc.poll() is None else f"the client exited {proc.returncode}")


def _drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def run(preset: str, tries: int) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="geofed-rejoin-"))
    fed = {
        "model": PRESETS[preset],
        "training": {"batch_size": 1, "local_steps": 2, "sync_interval_s": 600, "eval_every": 1000},
        "aggregation": {"mode": "async", "buffer_size": 1},
        "codec": {"name": "int8"},
    }
    data = write_file_list(work / "client.list", stdlib_split(2).clients[0][:50])
    ps = PSProcess(work, fed)
    rows = []
    try:
        ps.start()
        admin = AdminClient(ps.address, ps.admin_credential, insecure=True, timeout_s=60)

        def launch(attempt: int, master: bool) -> tuple[subprocess.Popen, Path, float]:
            token, _ = admin.create_token("bench.c0", master=master)
            log = work / f"client-{attempt}.log"
            t0 = time.monotonic()
            # Every thread the machine has: the time to first step is what is measured.
            proc = start_client(token, work / "token", log, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                ps=ps.address, client_id="bench.c0", data=data, work_dir=work / "client")
            return proc, log, t0

        proc, log, _ = launch(0, master=True)
        _wait_for(log, r"event=sync client=bench.c0 round=1", 1800, proc)  # checkpoint written after the sync
        for attempt in range(1, tries + 1):
            for cold in (False, True):
                stop(proc, signal.SIGKILL)
                dropped = _drop_caches() if cold else False
                proc, log, t0 = launch(attempt * 2 + cold, master=False)
                m = _wait_for(log, r"event=first_step client=\S+ seconds_since_start=([0-9.]+)", 600, proc)
                wall = time.monotonic() - t0
                text = log.read_text()
                rows.append(
                    {
                        "preset": preset,
                        "cold": cold,
                        "caches_dropped": dropped,
                        "process_to_first_step_s": wall,
                        "agent_to_first_step_s": float(m.group(1)),
                        "resumed": "event=resumed" in text,
                    }
                )
                print(rows[-1], flush=True)
                _wait_for(log, r"event=sync client=bench.c0 round=1", 1800, proc)
        stop(proc, signal.SIGKILL)
        admin.close()
    finally:
        ps.kill()
    return rows


def table(rows: list[dict], command: str) -> str:
    out = [
        "## Client rejoin time",
        "",
        f"Command: `{command}`",
        "",
        "| model | checkpoint | process start → first step | of which imports and start-up | resumed from checkpoint |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        kind = (
            ("cold (page cache dropped)" if r["caches_dropped"] else "cold requested, cache drop refused")
            if r["cold"]
            else "warm"
        )
        out.append(
            f"| {r['preset']} | {kind} | {r['process_to_first_step_s']:.2f} s "
            f"| {r['process_to_first_step_s'] - r['agent_to_first_step_s']:.2f} s | {r['resumed']} |"
        )
    out += [
        "",
        "'Process start' is the parent's `Popen`; 'first step' is the agent's `event=first_step` log line, "
        "written once the global model is loaded and the optimizer state and data position are restored, right "
        "before the first training step runs.",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    p.add_argument("--tries", type=int, default=2)
    p.add_argument("--write")
    args = p.parse_args()
    rows = run(args.preset, args.tries)
    text = table(rows, "python bench/rejoin_bench.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.write:
        from bench_markers import replace_section

        replace_section(Path(args.write), "rejoin", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
