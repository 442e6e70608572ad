"""CPU of a rejoining client's first model-difference decode, `model_delta.decode` against `grid_apply.decode`.

A relaunched client decodes its first `grid_delta` transfer in a fresh process, so every large temporary
meets fresh pages (on this VM the first touch is system CPU, and it is most of the cost). Each try here is
a fresh process that decodes once, as a rejoin does, and reports its user and system CPU; the bytes come
from a real checkpoint: the base model the client kept and the model it trained, published on grids as
the PS does (`downlink.grid_steps` 8, the default until 2026-12-01; now 4), so the difference has a real
size and level count.

Usage: .venv/bin/python bench/rejoin_decode.py <latest.pt of a rejoin_bench work folder> [--tries 5]
(prints one JSON line per try, then the medians; the output kept under bench/results/rejoin/).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DECODERS = ("model_delta", "grid_apply")


def _prepare(checkpoint: Path, out: Path) -> dict:
    import torch

    from geofed.codec import model_delta as md

    ck = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    base, trained = ck["base_model"].numpy(), ck["model"].numpy()
    e1 = md.choose_exponents(base, None, None, 8.0)
    p1 = md.snap_to_grid(base, e1)
    e2 = md.choose_exponents(trained, p1, e1, 8.0)
    p2 = md.snap_to_grid(trained, e2)
    payload = md.encode(p1, e1, p2, e2)
    if payload is None:
        raise SystemExit("the two versions are not an exact difference apart")
    np.save(out / "have.npy", p1)
    np.save(out / "want.npy", p2)
    (out / "payload.bin").write_bytes(payload)
    return {"numel": int(p1.size), "payload_bytes": len(payload)}


def _one(decoder: str, folder: Path) -> dict:
    """In this (fresh) process: decode once, check the result bit for bit, report CPU and wall."""
    import torch  # noqa: F401  (a client has torch loaded: same allocator state as a rejoin)

    if decoder == "grid_apply":
        from client_agent.connection.grid_apply import decode, warm

        warm()  # the agent loads the kernels in its preload thread, before any transfer
    else:
        from geofed.codec.model_delta import decode
    have, want = np.load(folder / "have.npy"), np.load(folder / "want.npy")
    payload = (folder / "payload.bin").read_bytes()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    got = decode(have, payload)
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        raise SystemExit(f"{decoder}: the decoded vector differs from the published one")
    return {"decoder": decoder, "user_s": round(r1.ru_utime - r0.ru_utime, 3),
            "sys_s": round(r1.ru_stime - r0.ru_stime, 3), "wall_s": round(wall, 3),
            "huffman": os.environ.get("GEOFED_HUFFMAN", "default"), "loadavg": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path, nargs="?")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--one", choices=DECODERS, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.folder)))
        return 0
    with tempfile.TemporaryDirectory(prefix="geofed-decode-") as tmp:
        folder = Path(tmp)
        print(json.dumps({"checkpoint": str(args.checkpoint), **_prepare(args.checkpoint, folder)}), flush=True)
        rows: list[dict] = []
        for _ in range(args.tries):
            for decoder in DECODERS:  # alternated, so both see the same load over time
                out = subprocess.run([sys.executable, __file__, "--one", decoder, "--folder", str(folder)],
                                     capture_output=True, text=True, check=True).stdout
                rows.append(json.loads(out.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), flush=True)
    for decoder in DECODERS:
        mine = [r for r in rows if r["decoder"] == decoder]
        cpu = [r["user_s"] + r["sys_s"] for r in mine]
        print(f"{decoder:12s} CPU median {statistics.median(cpu):.2f} s ({min(cpu):.2f}-{max(cpu):.2f}, "
              f"{len(cpu)} fresh processes); system part median {statistics.median(r['sys_s'] for r in mine):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
