"""Train a tiny GPT-2 for a few steps alone or as one rank under torchrun; rank 0 saves what it saw.

Run by `test_client_fsdp.py`: once in-process (world 1) and once as two gloo ranks with FSDP2. The
same seed, data and global batch must give the same delta either way.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import numpy as np
import torch

from client_agent.data.streams import TokenStream
from client_agent.training.flat import flatten
from client_agent.training.fsdp import broadcast_flat_from_rank0, full_flat_on_rank0, init_distributed, shard_model
from client_agent.training.model import build_model
from client_agent.training.trainer import LocalTrainer
from geofed.config import ModelConfig, TrainingConfig

MODEL = ModelConfig(family="gpt2", n_layer=2, n_head=4, n_embd=64, block_size=32, seed=3)
TRAIN = TrainingConfig(lr=3e-3, warmup_steps=2, batch_size=8, micro_batch_size=2, precision="fp32")


def tokens() -> np.ndarray:
    """Deterministic byte tokens with structure to learn (shuffled word soup)."""
    words = np.random.default_rng(0).choice(["alpha ", "beta ", "gamma ", "delta\n", "eps ", "zeta "], 6000)
    return np.frombuffer("".join(words).encode(), dtype=np.uint8).astype(np.uint16)


def persisted(state: dict) -> dict:
    """`state` after a trip through torch.save/torch.load, as a checkpoint file would give it back."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def run(out: Path, steps: int) -> None:
    """Train `steps` steps; save delta, losses, and the resume check on rank 0."""
    rank, world = init_distributed()
    torch.manual_seed(0)
    model = build_model(MODEL)
    base = flatten(model)
    if world > 1:
        shard_model(model)
    stream = TokenStream(tokens(), MODEL.block_size, seed=1, eval_fraction=0.1)
    trainer = LocalTrainer(model, TRAIN, stream, "cpu", rank=rank, world=world)
    stats = trainer.train(steps)
    after = full_flat_on_rank0(model)
    eval_loss = trainer.evaluate(2)

    # Resume check: save, train one step (A); reload model + optimizer + position, train again (B).
    state = persisted(trainer.state_dict())
    trainer.train(1)
    step_a = full_flat_on_rank0(model)
    if world > 1:
        broadcast_flat_from_rank0(model, after)
    else:
        from client_agent.training.flat import load_flat_

        load_flat_(model, after)
    trainer.load_state_dict(state)
    trainer.train(1)
    step_b = full_flat_on_rank0(model)
    if rank == 0:
        torch.save(
            {
                "delta": after - base,
                "mean_loss": stats.mean_loss,
                "eval_loss": eval_loss,
                "resume_diff": float((step_a - step_b).abs().max()),
                "moved": float((step_a - after).abs().max()),
                "world": world,
            },
            out,
        )
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    run(Path(sys.argv[1]), int(sys.argv[2]))
    # gloo's C++ threads can abort ("terminate called without an active exception") in static destructors
    # at interpreter exit, after all work is done; leave without running them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
