"""FSL-SAGE end to end: a real PS, the split trainer process and a client agent, every byte they exchange
recorded on the way. Raw data never leaves the client; a preempted split-learning client rejoins."""

from __future__ import annotations

import re
import signal
import sys

import numpy as np
import pytest

from client_agent.training.checkpoint import CheckpointManager
from geofed_apps.groups import free_port
from geofed_apps.launch import spawn, start_client, stop, wait_until, write_token
from geofed_testing.procs import PSNode, Reaper
from geofed_testing.recorder import RecordingProxy, private_corpus
from geofed_testing.wire import mint


def federation(trainer: str) -> dict:
    return {
        "name": "split-test",
        "model": {"n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 64},
        "training": {"lr": 3e-3, "warmup_steps": 2, "batch_size": 4, "local_steps": 4, "sync_interval_s": 3.0,
                     "eval_every": 1000},
        "aggregation": {"mode": "async", "buffer_size": 1, "global_lr": 1.0, "max_staleness": 16},
        "codec": {"name": "int8"},
        "paradigm": {"name": "fsl-sage", "cut_layer": 1, "trainer": trainer, "align_every": 1, "align_batches": 1,
                     "align_steps": 5},
    }


@pytest.mark.slow  # 60-90 s on 2 shared cores; test_fsl_sage_exchange.py covers the exchange in seconds
def test_raw_data_never_leaves_and_a_preempted_split_client_rejoins(tmp_path):
    """Every byte the client sends to the PS and to the split trainer is recorded: no window of its text is in
    them. The client is SIGKILLed after its first exchange and relaunched: it resumes from its checkpoint
    (auxiliary model included), exchanges with the trainer again and the federation moves on."""
    with Reaper() as reaper:
        # Prepare: PS (with the peer secret), trainer behind one recorder, the client dialling the PS via another
        data = private_corpus(tmp_path / "data")
        peer = write_token(tmp_path / "peer.token", "peer-" + "x" * 40)
        trainer_port = free_port()
        to_trainer = RecordingProxy(trainer_port)
        reaper.add(to_trainer.close)
        ps = PSNode(tmp_path / "ps", federation(f"127.0.0.1:{to_trainer.port}"), extra=["--peer-token-file", str(peer)])
        reaper.add(ps.kill)
        ps.start()
        to_ps = RecordingProxy(ps.port)
        reaper.add(to_ps.close)
        ready = tmp_path / "trainer.ready"
        trainer = reaper.proc(spawn(
            [sys.executable, "-m", "client_agent.split.trainer", "--federation", str(ps.fed_file), "--ps", ps.address,
             "--peer-token-file", str(peer), "--host", "127.0.0.1", "--port", str(trainer_port),
             "--out", str(tmp_path / "server-part"), "--insecure", "--ready-file", str(ready)],
            tmp_path / "trainer.log"))  # fmt: skip
        wait_until(ready.is_file, 60, "the split trainer to listen")
        token = mint(ps, "site.split", master=True)
        work = tmp_path / "client"

        def launch(log: str, duration_s: float):
            return reaper.proc(start_client(token, tmp_path / "token", tmp_path / log, ps=f"127.0.0.1:{to_ps.port}",
                                            client_id="site.split", data=data, work_dir=work, duration_s=duration_s,
                                            seed=0))

        # Execute: train until the first exchange, preempt, relaunch
        first = launch("client-1.log", 60)
        wait_until(lambda: "event=split_aligned" in (tmp_path / "client-1.log").read_text(), 120,
                   "the client's first exchange with the trainer")
        # latest.pt itself: while the first one is written only its hidden temp file is there
        wait_until((work / "checkpoints" / "latest.pt").is_file, 30, "a client checkpoint")
        stop(first, signal.SIGKILL)
        version_at_kill = ps.status()["version"]
        ckpt = CheckpointManager(work / "checkpoints").load_latest()
        second = launch("client-2.log", 6)
        assert second.wait(120) == 0, (tmp_path / "client-2.log").read_text()[-3000:]

        # Assert: the relaunched client resumed, exchanged again, the federation moved on
        log2 = (tmp_path / "client-2.log").read_text()
        assert "event=resumed" in log2 and "event=split_aligned" in log2
        assert ps.status()["version"] > version_at_kill
        assert ckpt is not None and any(k.startswith("transformer.h.1.") for k in ckpt.private)  # aux rides along
        aligned = re.findall(r"event=split_align client=site\.split ", (tmp_path / "trainer.log").read_text())
        assert len(aligned) >= 2
        # Assert: nothing the client sent holds its text. The recorders did see the traffic (positive control).
        sent = bytes(to_ps.up) + bytes(to_trainer.up)
        assert b"site.split" in bytes(to_ps.up) and len(to_trainer.up) > 20_000
        text = b"".join(p.read_bytes() for p in sorted(data.glob("*.txt")))
        rng = np.random.default_rng(1)
        windows = [text[i : i + 16] for i in rng.integers(0, len(text) - 16, 3000)]
        leaked = [w for w in windows if w in sent]
        assert not leaked, f"{len(leaked)} windows of the client's text were sent, e.g. {leaked[:2]}"
        # Not even single words: a 10+ letter word of the corpus appearing in the recording would be a leak too
        words = {w for w in text.split() if len(w) >= 10}
        assert not [w for w in list(words)[:2000] if w in sent]
        stop(trainer)
