"""PS peak memory while 8 clients push concurrently, relative to the model size (issue 2's target: <= 3x).

Usage: .venv/bin/python bench/ps_memory_bench.py [--numel 124000000] [--clients 8] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from client_agent.connection.ps_client import PSClient
from geofed.codec import make_codec
from geofed_apps.launch import PSProcess


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def run(numel: int, clients: int, mode: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix="geofed-mem-"))
    fed = {"aggregation": {"mode": "async", "buffer_size": 1 if mode == "apply-each" else clients,
                           "buffer_timeout_s": 600}}
    ps = PSProcess(work, fed, extra=["--checkpoint-every", "1000"])
    try:
        ps.start()
        pid, address, admin = ps.proc.pid, ps.address, ps.admin()
        idle_kb = _status_kb(pid, "VmRSS")
        rng = np.random.default_rng(0)
        theta = rng.standard_normal(numel, dtype=np.float32)
        conns = []
        for i in range(clients):
            token, _ = admin.create_token(f"mem.c{i}", master=(i == 0))
            c = PSClient(address, f"mem.c{i}", lambda t=token: t, insecure=True)
            c.join()
            conns.append(c)
        header, frames = make_codec("fp32").encode(theta)
        t0 = time.perf_counter()
        conns[0].push(base_version=0, codec_header=header, frames=frames, init=True,
                      manifest=[("flat", (numel,), "float32")])
        init_s = time.perf_counter() - t0
        after_init_kb = _status_kb(pid, "VmRSS")
        delta = (rng.standard_t(3, numel) * 1e-3).astype(np.float32)
        t0 = time.perf_counter()
        codec = make_codec("int8", "huffman")
        enc_header, enc_frames = codec.encode(delta)
        payload = list(enc_frames)
        encode_s = time.perf_counter() - t0
        del delta, theta
        results: list = [None] * clients

        def push(i: int) -> None:
            results[i] = conns[i].push(base_version=1, codec_header=enc_header, frames=iter(payload))

        threads = [threading.Thread(target=push, args=(i,)) for i in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        push_s = time.perf_counter() - t0
        peak_kb = _status_kb(pid, "VmHWM")
        status = admin.status()
        for c in conns:
            c.close()
        admin.close()
        model_bytes = numel * 4
        return {
            "numel": numel, "clients": clients, "mode": mode, "model_mb": model_bytes / 1e6,
            "payload_mb": sum(len(p) for p in payload) / 1e6, "idle_rss_mb": idle_kb * 1024 / 1e6,
            "after_init_rss_mb": after_init_kb * 1024 / 1e6, "peak_rss_mb": peak_kb * 1024 / 1e6,
            "peak_over_model": peak_kb * 1024 / model_bytes,
            "increment_over_model": (peak_kb - idle_kb) * 1024 / model_bytes,
            "init_s": init_s, "encode_s": encode_s, "push_s": push_s, "final_version": status["version"],
            "statuses": sorted(r.status for r in results),
        }
    finally:
        ps.kill()


def _commit() -> str:
    """The checkout's commit, with '+uncommitted' when tracked files differ from it."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=here).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=here).stdout.strip()
        return head + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(rows: list[dict], command: str, raw: str | None = None) -> str:
    out = [
        "## PS memory under concurrent pushes", "", f"Command: `{command}`"
        + (f"; raw output `{raw}` (one JSON line per row, with the load average and commit)" if raw else ""), "",
        "| model params | clients | aggregation | model (fp32) | one encoded delta | PS RSS idle | PS peak RSS "
        "(VmHWM) | peak / model | (peak − idle) / model | 8 pushes took |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['numel'] / 1e6:.0f}M | {r['clients']} | {r['mode']} | {r['model_mb']:.0f} MB "
            f"| {r['payload_mb']:.0f} MB "
            f"| {r['idle_rss_mb']:.0f} MB | {r['peak_rss_mb']:.0f} MB | {r['peak_over_model']:.2f}x "
            f"| {r['increment_over_model']:.2f}x | {r['push_s']:.1f} s |"
        )
    out += ["", "`apply-each`: every push triggers an outer step (buffer K=1); `buffer-all`: one step after all 8 "
            "(K=8). Peak counts the interpreter and gRPC (the idle column) plus the global model, the running sum, "
            "the next version being published while the previous is still referenced, and the spooled encoded "
            "payloads (spilled to disk above 32 MiB).", ""]
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--numel", type=int, default=124_000_000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--write", help="update this markdown file between <!-- psmem:begin/end --> markers")
    p.add_argument("--out", type=Path, help="write each row as a JSON line here (the raw output to keep)")
    args = p.parse_args()
    rows = []
    for mode in ("apply-each", "buffer-all"):
        load = os.getloadavg()
        rows.append({**run(args.numel, args.clients, mode), "loadavg_at_start": load, "commit": _commit(),
                     "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    for r in rows:
        print(r)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = "python bench/ps_memory_bench.py " + " ".join(sys.argv[1:])
    text = table(rows, command.strip(), str(args.out) if args.out else None)
    print(text)
    if args.write:
        from bench_markers import replace_section

        replace_section(Path(args.write), "psmem", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
