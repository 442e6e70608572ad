"""Held-out loss of the global models a PS published: what `geofed local` reports and the benchmarks plot.

The PS writes each version it checkpoints as a file in its checkpoint directory; this module reads them
with the PS's own loader (safetensors, no pickle) and scores them on fixed held-out batches, so every
caller compares models on the same numbers.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from geofed.config import FederationConfig
from ps_server.checkpoint import CheckpointStore, PSCheckpoint

EVAL_BATCHES = 8
EVAL_BATCH_SIZE = 8
_VERSION = re.compile(r"-v(\d+)\.")


class GlobalEvaluator:
    """Eval loss of a global model on the held-out files (the number `geofed local`'s summary line reports)."""

    def __init__(self, fed: FederationConfig, eval_files: list[Path], cache: Path) -> None:
        import torch

        from client_agent.data.files import load_data
        from client_agent.data.streams import open_stream
        from client_agent.data.tokenizer import load_tokenizer

        from .export import build_global_model

        torch.set_num_threads(1)
        # Text or prompt/completion examples, tokenised as every client tokenises them (model.tokenizer).
        data, _ = load_data(eval_files, load_tokenizer(fed.model.tokenizer), cache=cache)
        self.stream = open_stream(data, fed.model.block_size, seed=1234, eval_data=data)
        self.batches = self.stream.eval_batches(EVAL_BATCHES, EVAL_BATCH_SIZE)
        # The paradigm builds and reparametrises the model as every client does (seeded init or `model.path`:
        # this is Θ0), and says which parameters the PS's flat vector holds.
        built = build_global_model(fed)
        self.paradigm, self.model = built.paradigm, built.model

    def loss(self, flat: np.ndarray | None = None) -> float:
        """Mean loss over the fixed batches, of Θ0 or of the flat parameters `flat` (which stay loaded)."""
        import torch

        from client_agent.training.flat import load_flat_
        from client_agent.training.model import lm_loss

        if flat is not None:
            load_flat_(self.model, torch.as_tensor(flat), self.paradigm.exchanged)
        with torch.no_grad():
            return float(sum(lm_loss(self.model, b).item() for b in self.batches) / len(self.batches))


def newest(ckpt_dir: Path) -> PSCheckpoint | None:
    """The newest checkpoint holding a model (None before the master's Θ0 arrived)."""
    ckpt = CheckpointStore(ckpt_dir).load_latest()
    return ckpt if ckpt is not None and ckpt.version > 0 else None


def published(ckpt_dir: Path) -> list[tuple[int, float, Path]]:
    """(version, mtime as time.time(), path) of every PS checkpoint in `ckpt_dir`, oldest version first."""
    if not ckpt_dir.is_dir():
        return []
    found = []
    for path in CheckpointStore(ckpt_dir).files():
        m = _VERSION.search(path.name)
        if m is None:
            raise ValueError(f"cannot read a version number from checkpoint file name {path.name!r}")
        found.append((int(m.group(1)), path.stat().st_mtime, path))
    return sorted(found)


def load_flat(path: Path) -> np.ndarray:
    """The global parameters stored in one PS checkpoint."""
    return CheckpointStore.load(path).flat
