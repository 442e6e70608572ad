"""Site operator memory with many unrelated Pods in the cluster: the API server's label selector against none.

The emulated API server (tests/k8s/apiserver) holds `--pods` Pods without the SiteClient label; the
site operator runs as its own process (`python -m geofed_operator operator --role site -A`), once as
shipped (kopf passes `labelSelector=geofed.io/siteclient` on its pods list and watch) and once with
that selector removed (kopf lists every Pod and filters in the operator). Its peak RSS (VmHWM) is read
once its pods watch is open and it has had `--settle` seconds to process the initial list.

Usage: PYTHONPATH=.:operator .venv/bin/python bench/operator_watch_memory_bench.py [--pods 10000]
       [--write bench/results/operator-watch-memory/result.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kmock
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from tests.k8s.emulator import GeofedEmulator  # noqa: E402

# The shipped operator with kopf's pods label selector removed again: what it did before.
UNFILTERED = (
    "import sys, geofed_operator.handlers as h\n"
    "configure = h.configure_kopf\n"
    "def without_selector(settings):\n"
    "    configure(settings)\n"
    "    settings.watching.label_selectors.clear()\n"
    "h.configure_kopf = without_selector\n"
    "from geofed_operator.__main__ import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _pod(i: int) -> dict[str, Any]:
    """A Pod of some other workload, about the size of a small Deployment's pod."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"web-{i:05d}", "namespace": "default",
                     "labels": {"app": "web", "pod-template-hash": f"{i % 97:05d}"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                                 "env": [{"name": f"VAR_{k}", "value": "x" * 32} for k in range(8)],
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
                 "nodeName": f"node-{i % 50}"},
    }  # fmt: skip


def _kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


async def measure(api: GeofedEmulator, kubeconfig: Path, *, filtered: bool, settle_s: float) -> dict[str, Any]:
    """Start the site operator, wait for its pods watch, let it settle; its memory and the watch's query."""
    start = len(list(api))
    head = ["-m", "geofed_operator"] if filtered else ["-c", UNFILTERED]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": f"{REPO}:{REPO / 'operator'}"}
    log = (kubeconfig.parent / f"operator-{filtered}.log").open("w")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *head, "operator", "--role", "site", "--all-namespaces", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    try:
        began = time.monotonic()
        while time.monotonic() - began < 120:
            reads = [r for r in list(api)[start:] if r.resource is not None and r.resource.plural == "pods"]
            if any(r.params.get("watch") == "true" for r in reads) or proc.returncode is not None:
                break
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError("the operator never watched pods")
        if proc.returncode is not None:
            raise RuntimeError(f"the operator exited: {(kubeconfig.parent / f'operator-{filtered}.log').read_text()}")
        watch_open_s = time.monotonic() - began
        await asyncio.sleep(settle_s)
        rss, peak = _kb(proc.pid, "VmRSS"), _kb(proc.pid, "VmHWM")
        if proc.returncode is not None:
            raise RuntimeError(f"the operator exited: {(kubeconfig.parent / f'operator-{filtered}.log').read_text()}")
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        log.close()
    selectors = sorted({str(r.params.get("labelSelector")) for r in reads})
    return {"filtered": filtered, "label_selector": selectors, "rss_mib": round(rss / 1024, 1),
            "peak_rss_mib": round(peak / 1024, 1), "watch_open_s": round(watch_open_s, 1)}  # fmt: skip


async def main_async(pods: int, settle_s: float) -> list[dict[str, Any]]:
    async with GeofedEmulator() as api, kmock.Server(api):
        api.declare_builtins()
        api.declare_crds(REPO / "crds")
        for i in range(pods):
            api.seed(_pod(i))
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = Path(tmp) / "kubeconfig"
            kubeconfig.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "bench",
                "clusters": [{"name": "bench", "cluster": {"server": str(api.url).rstrip("/")}}],
                "users": [{"name": "bench", "user": {"token": "emulated-token"}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
            }))  # fmt: skip
            return [await measure(api, kubeconfig, filtered=f, settle_s=settle_s) for f in (True, False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the watch opens")
    parser.add_argument("--write", type=Path, help="write the results as markdown here")
    args = parser.parse_args()
    rows = asyncio.run(main_async(args.pods, args.settle))
    print(json.dumps(rows, indent=2))
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"# Site operator memory with {args.pods} unrelated Pods", "",
                 "`PYTHONPATH=.:operator .venv/bin/python bench/operator_watch_memory_bench.py "
                 f"--pods {args.pods} --settle {args.settle:g}` (one run each, on a shared 2-core machine).", "",
                 "| pods list/watch labelSelector | RSS MiB | peak RSS MiB | watch open after s |", "|---|---|---|---|"]
        for row in rows:
            selector = ", ".join(row["label_selector"]) if row["filtered"] else "none (filtered in the operator)"
            lines.append(f"| {selector} | {row['rss_mib']} | {row['peak_rss_mib']} | {row['watch_open_s']} |")
        args.write.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
