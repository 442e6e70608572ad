"""`geofed local --paradigm fsl-sage`: the PS, the server-side split trainer and N split-learning clients.

The PS federates the client-side part; the trainer (`python -m client_agent.split.trainer`, its own
process) holds the server-side blocks and checks clients' sessions with the PS through the peer secret
they share. The summary scores the whole model (federated client part + the trainer's blocks) and
reports what a client's training holds in memory against what the full model would need.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path

from .groups import free_port
from .launch import StartError, child_env, spawn, wait_until, write_token

CUT_LAYER = 1
SERVER_FILE = "server-part.safetensors"


class SplitLocal:
    """The split trainer of one local run and the summary lines only split learning has."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def attach(self, run: Path) -> None:
        """Files of the run: the peer secret the PS and the trainer share, the trainer's output folder."""
        self.peer_token = write_token(run / "tokens" / "peer.token", "peer-" + secrets.token_urlsafe(32))
        self.out = run / "split-trainer"

    def settings(self) -> dict:
        """Federation settings of the preset: the split paradigm, cut after the first block."""
        return {"paradigm": {"name": "fsl-sage", "cut_layer": CUT_LAYER, "trainer": f"127.0.0.1:{self.port}"}}

    def ps_flags(self) -> list[str]:
        return ["--peer-token-file", str(self.peer_token)]

    def start(self, fed_file: Path, ps_address: str, log: Path, timeout: float = 60.0) -> subprocess.Popen:
        ready = self.out / "ready"
        cmd = [sys.executable, "-m", "client_agent.split.trainer", "--federation", str(fed_file), "--ps", ps_address,
               "--peer-token-file", str(self.peer_token), "--host", "127.0.0.1", "--port", str(self.port),
               "--out", str(self.out), "--insecure", "--ready-file", str(ready)]
        self.out.mkdir(parents=True, exist_ok=True)
        self.proc = spawn(cmd, log, env=child_env())
        proc = self.proc
        wait_until(ready.is_file, timeout, "the split trainer to listen",
                   dead=lambda: f"the split trainer exited with {proc.returncode}" if proc.poll() is not None else None)
        return self.proc

    def full_loss(self, evaluator, fed, flat=None) -> float:
        """Held-out loss of the whole model: Θ0 (flat None), or the federated client part `flat` with the
        trainer's server-side blocks."""
        import torch
        from safetensors.torch import load_file

        from client_agent.split.parts import full_model
        from client_agent.training.flat import load_flat_
        from client_agent.training.model import build_model, lm_loss

        if flat is None:
            model = build_model(fed.model)
        else:
            load_flat_(evaluator.model, torch.as_tensor(flat), evaluator.paradigm.exchanged)
            path = self.out / SERVER_FILE
            if not path.exists():
                raise StartError(f"the split trainer saved no server-side blocks in {self.out}")
            model = full_model(fed.model, evaluator.model.state_dict(), load_file(path), CUT_LAYER)
        model.eval()
        with torch.no_grad():
            return float(sum(lm_loss(model, b).item() for b in evaluator.batches) / len(evaluator.batches))

    @staticmethod
    def memory_line(logs: Path) -> str:
        """`client peak memory: X MB (full model: Y MB)` from the clients' logged training state, and the
        largest measured process peak (`python -m client_agent.split.peak_memory` compares measured peaks)."""
        pattern = re.compile(
            r"event=split_memory state_bytes=(\d+) full_model_bytes=(\d+)(?: measured_peak_bytes=(\d+))?"
        )
        found = [tuple(int(g or 0) for g in m.groups()) for p in sorted(logs.glob("client-*.log"))
                 for m in pattern.finditer(p.read_text(errors="replace"))]
        if not found:
            return "client peak memory: ? MB (no client logged its training state)"
        state, full, measured = (max(f[i] for f in found) for i in range(3))
        return (f"client peak memory: {state / 1e6:.2f} MB (full model: {full / 1e6:.2f} MB) "
                f"[parameters, gradients, AdamW state, computed]; measured client process peak "
                f"{measured / 1e6:.1f} MB [resident set or CUDA allocator: activations and runtime included]")

    def exchanges(self, log: Path) -> int:
        return len(re.findall(r"event=split_align ", log.read_text(errors="replace"))) if log.exists() else 0
