"""Two ranks train on a global batch of 5 rows in micro-batches of 2; rank 0 checks the gradients.

Run by `test_client_fsdp.py` under torchrun (gloo). Rank 0 holds 2 rows and rank 1 holds 3, so a
per-rank split would give rank 0 one pass and rank 1 two, and the ranks' collectives would not pair
up. Each step's gradient (captured at the optimizer step, gathered in full) is compared with one
computed independently: a plain, unsharded copy of the model, one forward over all 5 rows, the mean
next-token cross-entropy, one backward.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from client_agent.data.streams import TokenStream
from client_agent.training.flat import load_flat_, selected
from client_agent.training.fsdp import full_flat_on_rank0, init_distributed, shard_model
from client_agent.training.model import build_model, count_parameters
from client_agent.training.precision import adamw_state_numel
from client_agent.training.trainer import LocalTrainer
from geofed.config import ModelConfig, TrainingConfig

MODEL = ModelConfig(family="gpt2", n_layer=2, n_head=4, n_embd=64, block_size=32, seed=3)
# grad_clip 0: compare raw gradients (a clipped one would hide a wrong overall scale).
TRAIN = TrainingConfig(lr=3e-3, warmup_steps=0, batch_size=5, micro_batch_size=2, precision="fp32", grad_clip=0.0)
STEPS = 2
SEED = 1


def tokens() -> torch.Tensor:
    words = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 200, (8000,), generator=words)
    return ids.numpy().astype("uint16")


def reference_loss_and_grad(flat_params: torch.Tensor, batch: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Mean next-token loss over every row of `batch` and its gradient, in one unsharded pass."""
    model = build_model(MODEL)
    load_flat_(model, flat_params)
    logits = model(input_ids=batch[:, :-1]).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    loss.backward()
    return float(loss), torch.cat([p.grad.reshape(-1) for _, p in selected(model)])


def run(out: Path) -> None:
    rank, world = init_distributed(timeout_s=60)
    model = build_model(MODEL)
    if world > 1:
        shard_model(model)
    stream = TokenStream(tokens(), MODEL.block_size, seed=SEED, eval_fraction=0.2)
    trainer = LocalTrainer(model, TRAIN, stream, "cpu", rank=rank, world=world)
    # AdamW memory the micro-batch probe reserves on this rank, and summed over ranks.
    reserved = adamw_state_numel(model)
    reserved_all = torch.tensor(reserved)
    if world > 1:
        torch.distributed.all_reduce(reserved_all)

    # Capture the full gradient and the parameters it was taken at, just before each optimizer step.
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    step = trainer.optimizer.step

    def capturing_step(*args, **kwargs):
        grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for _, p in selected(model)]
        seen.append((torch.cat([g.reshape(-1) for g in grads]), full_flat_on_rank0(model)))
        return step(*args, **kwargs)

    trainer.optimizer.step = capturing_step
    stats = trainer.train(STEPS)
    eval_loss = trainer.evaluate(2)
    after = full_flat_on_rank0(model)

    if rank == 0:
        # The same global batches, drawn whole by an independent stream at the same seed and position.
        ref_stream = TokenStream(tokens(), MODEL.block_size, seed=SEED, eval_fraction=0.2)
        grad_errors, ref_losses = [], []
        for grad, params in seen:
            ref_loss, ref_grad = reference_loss_and_grad(params, ref_stream.next_batch(TRAIN.batch_size))
            grad_errors.append(float((grad - ref_grad).norm() / ref_grad.norm()))
            ref_losses.append(ref_loss)
        with torch.no_grad():
            eval_rows = torch.cat(ref_stream.eval_batches(2, TRAIN.batch_size))
            ref_model = build_model(MODEL)
            load_flat_(ref_model, after)
            logits = ref_model(input_ids=eval_rows[:, :-1]).logits
            ref_eval = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), eval_rows[:, 1:].reshape(-1)))
        torch.save(
            {
                "world": world,
                "reserved": reserved,
                "reserved_all": int(reserved_all),
                "adamw_full": 2 * count_parameters(build_model(MODEL)),
                "plan": trainer.plan,
                "steps": stats.steps,
                "captured": len(seen),
                "grad_errors": grad_errors,
                "mean_loss": stats.mean_loss,
                "ref_mean_loss": sum(ref_losses) / len(ref_losses),
                "eval_loss": eval_loss,
                "ref_eval_loss": ref_eval,
            },
            out,
        )
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    run(Path(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see client_fsdp_worker.py: gloo's static destructors can abort at exit
