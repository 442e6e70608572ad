"""Does a SIGTERM reach a main thread asleep in `Event().wait()`? Plain Python, no geofed.

usage: python signal_thread.py RUNS [THREADS]
Each run starts a child whose main thread waits in `threading.Event().wait()` inside `try` with a SIGTERM
handler that raises, while THREADS other threads sleep 1 ms in a loop (as gRPC's pollers wake); the parent
sends SIGTERM once the child says it is ready and counts the children still alive 5 s later (hangs).
"""

import signal
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import signal, sys, threading, time
    class Stop(BaseException): pass
    def raise_stop(signum, frame): raise Stop()
    signal.signal(signal.SIGTERM, raise_stop)
    for _ in range(int(sys.argv[1])):
        threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(int, 1)], daemon=True).start()
    try:
        print("ready", flush=True)
        threading.Event().wait()
    except Stop:
        sys.exit(143)
""")

runs, threads = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "3"
hangs = 0
for _ in range(runs):
    child = subprocess.Popen([sys.executable, "-c", CHILD, threads], stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        hangs += 1
        child.kill()
        child.wait()
print(f"threads={threads} runs={runs} hangs={hangs}")
