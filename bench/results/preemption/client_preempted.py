"""Does a `geofed client` whose main thread sleeps in a lock wait exit 143 on SIGTERM? (the client's CLI, with a
set-up that prints "ready" and waits in `threading.Event().wait()`, as the preemption test's child does)

usage: python client_preempted.py RUNS  (run from the root of the checkout under test)
Counts exits 143 and hangs (alive 30 s after SIGTERM; the forced exit after 20 s counts as an exit 143
with `preempted_exit_forced`, reported apart).
"""

import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import sys, threading
    from client_agent import agent, cli

    def set_up(*args):
        print("ready", flush=True)
        threading.Event().wait()

    agent.set_up = set_up
    sys.exit(cli.main(sys.argv[1:]))
""")

runs = int(sys.argv[1])
counts = {"exit_143": 0, "forced_exit": 0, "hang": 0, "other": 0}
with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "token").write_text("t")
    cmd = [sys.executable, "-c", CHILD, "--ps", "127.0.0.1:1", "--client-id", "c", "--token-file",
           f"{tmp}/token", "--insecure", "--work-dir", f"{tmp}/work", "--data", tmp]
    for _ in range(runs):
        with open(f"{tmp}/err", "w") as err:
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            child.stdout.readline()
            child.send_signal(signal.SIGTERM)
            try:
                code = child.wait(30)
            except subprocess.TimeoutExpired:
                counts["hang"] += 1
                child.kill()
                child.wait()
                continue
        forced = "preempted_exit_forced" in Path(f"{tmp}/err").read_text()
        counts["forced_exit" if forced else "exit_143" if code == 143 else "other"] += 1
print(f"runs={runs} " + " ".join(f"{k}={v}" for k, v in counts.items()))
