"""Measured peak memory of local training: the split client part against the whole model, activations included.

On CUDA the figure is the caching allocator's peak (`torch.cuda.max_memory_allocated`); on CPU it is the
process's peak resident set size (`VmHWM` in /proc/self/status, see `peak.peak_bytes`), a high-water mark
of everything the process touched: parameters, gradients, optimizer state, activations and temporaries.

    python -m client_agent.split.peak_memory --federation JSON --part client|full --steps N

builds one part in a fresh process, trains it `steps` steps on random tokens and prints one JSON line:
what the process held before the model was built (imports, the model code's included; the peak is reset
there), the peak after building and training, their difference (what training took), the computed
parameter + gradient + AdamW bytes beside it, and the last loss.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from geofed.config import FederationConfig

from ..data.streams import TokenStream
from ..paradigms import client_paradigm
from ..training.trainer import LocalTrainer
from .parts import training_state_bytes
from .peak import measured_by, peak_bytes, reset_peak, resident_bytes


def measure(fed: FederationConfig, part: str, steps: int, device: str = "cpu") -> dict:
    """Train `part` ('client': the fsl-sage client part; 'full': the whole model) and report its peak."""
    dev = torch.device(device)
    # The model code (`client_agent.training.gpt2`, imported with the paradigms) is loaded before the peak is reset.
    if not reset_peak(dev):
        raise OSError("this system cannot reset the peak memory counter (/proc/self/clear_refs): no measurement")
    before = resident_bytes(dev)
    if part == "client":
        paradigm = client_paradigm(fed.paradigm)
        model = paradigm.prepare(paradigm.build(fed, initialise=True))
    elif part == "full":
        full = FederationConfig.model_validate({**fed.model_dump(), "paradigm": {"name": "pretrain"}})
        paradigm = client_paradigm(full.paradigm)
        model = paradigm.prepare(paradigm.build(full, initialise=True))
    else:
        raise ValueError(f"part must be 'client' or 'full', not {part!r}")
    tokens = np.random.default_rng(0).integers(0, fed.model.vocab_size - 1, 1 << 16).astype(np.uint16)
    stream = TokenStream(tokens, fed.model.block_size, seed=0)
    trainer = LocalTrainer(model.to(dev), fed.training, stream, dev, micro_batch_size=fed.training.batch_size)
    stats = trainer.train(steps)
    after = peak_bytes(dev)
    return {
        "part": part,
        "resident_before_model_bytes": before,
        "peak_bytes": after,
        "training_peak_bytes": after - before,
        "state_bytes": training_state_bytes(trainer.model, trainer.optimizer),
        "loss": stats.mean_loss,
        "device": dev.type,
        "measured_by": measured_by(dev),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m client_agent.split.peak_memory", description=__doc__.splitlines()[0])
    ap.add_argument("--federation", required=True, help="the federation's settings as JSON (paradigm fsl-sage)")
    ap.add_argument("--part", required=True, choices=["client", "full"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    fed = FederationConfig.model_validate_json(args.federation)
    if not fed.paradigm.needs_trainer:
        print(f"peak_memory: the federation runs paradigm {fed.paradigm.name!r}, which does not split the model",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    print(json.dumps(measure(fed, args.part, args.steps, args.device)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
