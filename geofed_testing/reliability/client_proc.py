"""A numpy client as its own process, so it can be SIGKILLed mid-push, mid-stream or mid-checkpoint.

It does what the agent's loop does on the wire (paper Fig. 1 steps 4-6), minus the training: join (a
relaunch re-joins with its persisted rejoin token), take the newest global model, push a delta named by
(client, round, base version), then write its checkpoint atomically with `client_agent.training.checkpoint`
(a ballast tensor stands in for optimizer state, so the write takes long enough to be interrupted).
A delta put off by its site's round share is dropped and the next round trains on a newer model, or on the
same one after --deferred-wait-s (30 s, as the agent does: `client_agent.connection.model_waits.next_model`). What the
agent does that this stand-in does not: train (its deltas are seeded values named by client, round and base
version), keep an error-feedback residual, tune its codec and interval, and checkpoint its encoded upload
before sending it (this one checkpoints after the receipt, so a relaunch redoes the round).
Every step is appended to an events file (fsynced), which the scenario reads to decide when to kill
and to know which deltas were attempted and which were acknowledged.

    python -m geofed_testing.reliability.client_proc --ps 127.0.0.1:PORT --client-id c.0 --token-file T
        --state-dir D --events E --rounds 5 --numel 200000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from client_agent.connection.model_waits import DEFERRED_WAIT_S
from client_agent.connection.ps_client import PSClient, PushError, StaleDeltaError
from client_agent.errors import DeferredDeltaError
from client_agent.training.checkpoint import CheckpointManager, ClientCheckpoint
from geofed.codec import make_codec
from geofed_testing.ledger import delta_for


def emit(path: Path, event: str, **fields) -> None:
    """Append one event line and make it durable before going on (the scenario may kill us next)."""
    line = json.dumps({"t": time.time(), "mono": time.monotonic(), "event": event, **fields})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def delta_tag(client_id: str, seq: int, base: int) -> str:
    return f"{client_id}/r{seq}/b{base}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ps", required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--numel", type=int, required=True)
    p.add_argument("--ballast-floats", type=int, default=0, help="extra checkpoint size (stands in for Adam state)")
    p.add_argument("--pause-s", type=float, default=0.0, help="sleep between rounds")
    p.add_argument("--deferred-wait-s", type=float, default=DEFERRED_WAIT_S,
                   help="after a put-off delta, how long to wait for a newer model before pushing on the one held")
    p.add_argument("--start-file", help="once joined, wait for this file before the first round (a relaunch finds it)")
    args = p.parse_args(argv)
    state, events = Path(args.state_dir), Path(args.events)
    ckpts = CheckpointManager(state / "checkpoints", keep_best=1)
    resumed = ckpts.load_latest()
    seq = resumed.step if resumed is not None else 0
    # The PS takes one delta per client and base version: each round trains from a newer model.
    pushed_on = resumed.base_version if resumed is not None else 0
    deferred = False  # the last push was put off by the site's round share
    emit(events, "start", pid=os.getpid(), seq=seq, resumed=resumed is not None)
    ps = PSClient(args.ps, args.client_id, lambda: Path(args.token_file).read_text().strip(), insecure=True,
                  state_dir=state)
    ballast = torch.zeros(args.ballast_floats, dtype=torch.float32)
    codec = make_codec("fp32")
    try:
        ps.join()
        emit(events, "joined", version=ps.join_version)
        ps.start()
        while args.start_file and not Path(args.start_file).exists():
            time.sleep(0.01)
        while seq < args.rounds:
            # After a put-off delta, as the agent does: a newer model, or after the deferred wait the one held again.
            model = ps.wait_for_version(pushed_on, timeout=args.deferred_wait_s if deferred else 120)
            if model is None and deferred:
                model = ps.latest()
            deferred = False
            if model is None:
                emit(events, "error", message="no newer global model within 120 s")
                return 4
            pushed_on = model.version
            emit(events, "model", version=model.version, seconds=model.seconds)
            tag = delta_tag(args.client_id, seq, model.version)
            header, frames = codec.encode(delta_for(tag, args.numel))
            emit(events, "push_begin", seq=seq, base=model.version, tag=tag)
            try:
                r = ps.push(base_version=model.version, codec_header=header, frames=frames, num_tokens=100)
            except StaleDeltaError as exc:
                emit(events, "stale", seq=seq, tag=tag, message=str(exc))
                continue
            except DeferredDeltaError as exc:  # as the agent does: drop it and train again
                emit(events, "deferred", seq=seq, tag=tag, message=str(exc))
                deferred = True
                continue
            emit(events, "receipt", seq=seq, tag=tag, status=r.status, version=r.version, attempts=r.attempts)
            seq += 1
            emit(events, "checkpoint_begin", seq=seq)
            ckpts.save_latest(ClientCheckpoint(model=ballast, optimizer={}, step=seq, data_position={"seq": seq},
                                               base_version=model.version))
            emit(events, "checkpoint_done", seq=seq)
            if args.pause_s:
                time.sleep(args.pause_s)
        emit(events, "done", seq=seq)
        return 0
    except PushError as exc:
        emit(events, "push_error", message=str(exc))
        return 3
    finally:
        ps.close()


def read_events(path: Path) -> list[dict]:
    """The events written so far (a torn last line, if any, is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


if __name__ == "__main__":
    sys.exit(main())
