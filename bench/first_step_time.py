"""One fresh process: the client's imports, its preload, the default model's build and one training step, timed.

The same steps as the master client of the default federation takes before its first step, without the PS: the
agent's modules, the agent's preload (`_preload_model_code`), the paradigm's build (the seeded Θ0) and one
`LocalTrainer` step on the default settings. Prints
one JSON line: seconds from the process's start (Linux /proc) to the end of each phase, the process's user CPU
seconds, the 1-minute load average, whether transformers was imported, and the commit of the code measured.

Usage (from outside the checkout, so PYTHONPATH picks the code measured):
    cd /tmp && [PYTHONPATH=/other/checkout] /path/.venv/bin/python /path/bench/first_step_time.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def _since_process_start() -> float:
    """Seconds since this process started (its start time in /proc/self/stat, clock ticks after boot)."""
    start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    marks: dict[str, float] = {}
    from client_agent.agent import _preload_model_code
    from client_agent.data.streams import TokenStream
    from client_agent.paradigms import client_paradigm
    from client_agent.training.trainer import LocalTrainer
    from geofed.config import FederationConfig

    marks["imports"] = _since_process_start()
    _preload_model_code()
    marks["preload"] = _since_process_start()
    fed = FederationConfig()
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    marks["model_built"] = _since_process_start()
    stream = TokenStream(list(b"the quick brown fox jumps over the lazy dog. " * 200), fed.model.block_size, seed=0)
    LocalTrainer(model, fed.training, stream, "cpu").train(1)
    marks["first_step"] = _since_process_start()
    code = Path(sys.modules["client_agent"].__file__).resolve().parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=code)
    print(json.dumps({
        **{f"t_{k}_s": round(v, 3) for k, v in marks.items()},
        "user_cpu_s": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime, 3),
        "transformers_imported": "transformers" in sys.modules, "model": type(model).__module__,
        "loadavg": os.getloadavg(), "commit": commit.stdout.strip(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
