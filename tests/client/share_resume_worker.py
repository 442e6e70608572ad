"""Only rank 0 can read `latest.pt` (a multi-node site: the file is on rank 0's node); every rank resumes.

Run by `test_client_fsdp.py` as two gloo ranks: rank 0 loads a real checkpoint, rank 1 has no file.
Both then resume a trainer from what rank 0 shared and train one step; rank 0 compares the result with
a trainer resumed from the file in one process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from client_fsdp_worker import MODEL, TRAIN, tokens

from client_agent.data.streams import TokenStream
from client_agent.training.checkpoint import CheckpointManager, ClientCheckpoint
from client_agent.training.flat import flatten, load_flat_
from client_agent.training.fsdp import broadcast_flat_from_rank0, full_flat_on_rank0, shard_model
from client_agent.training.model import build_model
from client_agent.training.ranks import Ranks
from client_agent.training.trainer import LocalTrainer


def trainer_for(rank: int, world: int) -> LocalTrainer:
    torch.manual_seed(0)
    model = build_model(MODEL)
    if world > 1:
        shard_model(model)
    stream = TokenStream(tokens(), MODEL.block_size, seed=1, eval_fraction=0.1)
    return LocalTrainer(model, TRAIN, stream, "cpu", rank=rank, world=world)


def write_checkpoint(directory: Path) -> None:
    """One process trains 3 steps and checkpoints (model, optimizer, position, private state)."""
    trainer = trainer_for(0, 1)
    trainer.train(3)
    state = trainer.state_dict()
    ckpt = ClientCheckpoint(
        model=flatten(trainer.model), optimizer=state["optimizer"], step=state["step"],
        data_position=state["data_position"], base_version=5, scaler=state["scaler"], eval_loss=2.5,
        private={"adapter.a": torch.arange(6.0).reshape(2, 3)}, paradigm="pretrain", manifest=[["w", [3], "float32"]],
    )
    CheckpointManager(directory).save_latest(ckpt)


def reference_after_one_step(directory: Path) -> torch.Tensor:
    resumed = CheckpointManager(directory).load_latest()
    trainer = trainer_for(0, 1)
    load_flat_(trainer.model, resumed.model)
    trainer.load_state_dict(resumed.trainer_state())
    trainer.train(1)
    return flatten(trainer.model)


def run(directory: Path, out: Path) -> None:
    ranks = Ranks(timeout_s=60)
    # Rank 1 sees no checkpoint directory at all: it lives on rank 0's node.
    own = CheckpointManager(directory).load_latest() if ranks.leader else None
    resumed = ranks.share_resume(own)
    trainer = trainer_for(ranks.rank, ranks.world)
    broadcast_flat_from_rank0(trainer.model, resumed.model if ranks.leader else None)
    trainer.load_state_dict(resumed.trainer_state())
    trainer.train(1)
    after = full_flat_on_rank0(trainer.model)
    seen = {
        "step": resumed.step, "data_position": resumed.data_position, "base_version": resumed.base_version,
        "scaler": resumed.scaler, "eval_loss": resumed.eval_loss, "paradigm": resumed.paradigm,
        "manifest": resumed.manifest, "private": {k: v.tolist() for k, v in resumed.private.items()},
    }
    Path(f"{out}.{ranks.rank}.json").write_text(json.dumps(seen))
    torch.distributed.destroy_process_group()  # the reference below is one process
    if ranks.leader:
        diff = float((after - reference_after_one_step(directory)).abs().max())
        Path(f"{out}.diff").write_text(str(diff))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write_checkpoint(Path(sys.argv[2]))
    else:
        run(Path(sys.argv[2]), Path(sys.argv[3]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
