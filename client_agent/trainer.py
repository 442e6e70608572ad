"""The client's local loop (Algorithm 1: update locally until H steps or timeout T, whichever first).

The inner AdamW lives here and survives across rounds: Algorithm 1 keeps the inner optimizer state on
the client, and only the parameter delta crosses the WAN. Every step covers exactly `batch_size`
sequences whatever the device's micro-batch, by gradient accumulation (§III-C2), so a V100 client and
an H100 client do the same work per step and their deltas weigh alike at the PS.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from client_agent.data import TokenStream, rank_rows
from client_agent.fsdp import full_optimizer_state, load_full_optimizer_state, reshard
from client_agent.model import lm_loss
from client_agent.precision import Precision, autocast, grad_scaler, pick_micro_batch, pick_precision
from geofed.config import TrainingConfig

GRAD_CLIP = 1.0
ADAM_BETAS = (0.9, 0.95)  # the usual LLM-pretraining betas (GPT-3, Llama); β2 = 0.999 reacts too slowly


class NonFiniteLossError(RuntimeError):
    """Training produced NaN/inf loss; the local model must be reset to the global one, not pushed."""


@dataclass(frozen=True)
class TrainStats:
    """What one `train` call did; `tokens` weighs this client's delta at the PS."""

    steps: int
    tokens: int
    samples: int
    mean_loss: float
    tokens_per_s: float
    seconds: float
    stopped_by: Literal["steps", "deadline", "max_steps"]
    lr: float
    grad_norm: float


def warmup_lr(step: int, base_lr: float, warmup_steps: int) -> float:
    """Linear warm-up over the first `warmup_steps` steps, then constant (rounds have no known end)."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def micro_batches(batch_size: int, micro: int) -> list[int]:
    """Split `batch_size` rows into ceil(batch_size / micro) micro-batches of near-equal size."""
    if batch_size < 1 or micro < 1:
        raise ValueError(f"batch_size and micro must be >= 1, got {batch_size} and {micro}")
    n = -(-batch_size // micro)
    return [batch_size // n + (1 if i < batch_size % n else 0) for i in range(n)]


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only; biases, norms and other vectors are not decayed (GPT-2/nanoGPT practice)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


class LocalTrainer:
    """Inner optimisation of one client, or one rank of an FSDP client (`rank`, `world`; model sharded).

    `deadline` in `train` is a `clock()` timestamp (default `time.monotonic`). `slowdown` > 1 sleeps
    (slowdown - 1) × step time after each step to emulate a slower GPU in heterogeneity demos.
    """

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainingConfig,
        stream: TokenStream,
        device: torch.device | str,
        *,
        micro_batch_size: int | None = None,
        precision: Precision | None = None,
        slowdown: float = 1.0,
        rank: int = 0,
        world: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if slowdown < 1.0:
            raise ValueError(f"slowdown is a factor >= 1 (1 = full speed), got {slowdown}")
        if cfg.batch_size < world:
            raise ValueError(f"batch_size {cfg.batch_size} is smaller than the {world} ranks sharing it")
        self.device = torch.device(device)
        self.model = model if world > 1 else model.to(self.device)  # FSDP models arrive sharded and placed
        self.cfg, self.stream = cfg, stream
        self.rank, self.world = rank, world
        self.precision = precision or pick_precision(cfg.precision, self.device)
        rows = rank_rows(cfg.batch_size, rank, world)
        self.rows = rows.stop - rows.start  # this rank's share of every global batch
        micro = micro_batch_size or cfg.micro_batch_size
        if not micro:
            micro = pick_micro_batch(model, stream.block_size, self.device, self.rows, self.precision)
        self.micro_batch_size = micro
        self.optimizer = torch.optim.AdamW(
            _param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=ADAM_BETAS, eps=1e-8
        )
        self.scaler = grad_scaler(self.precision, self.device, distributed=world > 1)
        self.slowdown, self.clock, self.sleep = slowdown, clock, sleep
        self.step = 0

    def _set_lr(self) -> float:
        lr = warmup_lr(self.step, self.cfg.lr, self.cfg.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _train_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step over a full batch; returns (sum of per-row loss on this rank, grad norm)."""
        batch = self.stream.next_batch(self.cfg.batch_size, self.rank, self.world)  # (rows, T+1)
        loss_sum = torch.zeros((), device=self.device)
        for chunk in batch.split(micro_batches(batch.shape[0], self.micro_batch_size)):
            chunk = chunk.to(self.device, non_blocking=True)
            with autocast(self.precision, self.device):
                loss = lm_loss(self.model, chunk)
            # Weight each micro-batch by its share of the global batch; FSDP averages ranks, hence × world.
            self.scaler.scale(loss * (chunk.shape[0] * self.world / self.cfg.batch_size)).backward()
            loss_sum += loss.detach() * chunk.shape[0]
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return loss_sum, grad_norm

    def _all_reduce(self, values: torch.Tensor, op: str = "SUM") -> torch.Tensor:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(values, op=getattr(dist.ReduceOp, op))
        return values

    def _past(self, deadline: float | None) -> bool:
        """Whether the deadline has passed; under FSDP any rank past it stops all (they share collectives)."""
        if deadline is None:
            return False
        past = torch.tensor(float(self.clock() >= deadline), device=self.device)
        return bool(self._all_reduce(past, "MAX").item())

    def train(self, max_steps: int, deadline: float | None = None) -> TrainStats:
        """Run until `max_steps` steps, the `deadline`, or `cfg.max_steps` in total, whichever comes first."""
        if max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {max_steps}")
        if self.cfg.max_steps and self.step + max_steps >= self.cfg.max_steps:
            max_steps, limit = max(0, self.cfg.max_steps - self.step), "max_steps"
        else:
            limit = "steps"
        self.model.train()
        start, steps, stopped_by = self.clock(), 0, limit
        loss_sum = torch.zeros((), device=self.device)
        grad_norm = torch.zeros((), device=self.device)
        lr = self._set_lr()
        while steps < max_steps:
            if self._past(deadline):
                stopped_by = "deadline"
                break
            t0 = self.clock()
            lr = self._set_lr()
            step_loss, grad_norm = self._train_step()
            loss_sum += step_loss
            steps += 1
            if self.slowdown > 1.0:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                extra = (self.slowdown - 1.0) * (self.clock() - t0)
                if deadline is not None:
                    extra = min(extra, max(0.0, deadline - self.clock()))
                self.sleep(extra)
        seconds = self.clock() - start
        rows_seen = torch.tensor(float(steps * self.rows), device=self.device)
        totals = self._all_reduce(torch.stack([loss_sum, rows_seen]))
        mean_loss = float(totals[0] / totals[1]) if steps else math.nan
        if steps and not math.isfinite(mean_loss):
            raise NonFiniteLossError(f"loss became {mean_loss} by step {self.step}; reload the global model")
        samples = steps * self.cfg.batch_size
        tokens = samples * self.stream.block_size
        norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        return TrainStats(
            steps=steps,
            tokens=tokens,
            samples=samples,
            mean_loss=mean_loss,
            tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
            seconds=seconds,
            stopped_by=stopped_by,
            lr=lr,
            grad_norm=float(norm),
        )

    @torch.no_grad()
    def evaluate(self, n_batches: int) -> float:
        """Mean loss on the stream's fixed held-out batches (feeds the top-k checkpoint manager, §III-B4)."""
        was_training = self.model.training
        self.model.eval()
        totals = torch.zeros(2, device=self.device)
        try:
            # Global eval batches of `batch_size` rows: the same held-out set whatever the GPU count.
            for batch in self.stream.eval_batches(n_batches, self.cfg.batch_size, self.rank, self.world):
                for chunk in batch.split(micro_batches(batch.shape[0], self.micro_batch_size)):
                    chunk = chunk.to(self.device, non_blocking=True)
                    with autocast(self.precision, self.device):
                        loss = lm_loss(self.model, chunk)
                    totals[0] += loss.float() * chunk.shape[0]
                    totals[1] += chunk.shape[0]
        finally:
            self.model.train(was_training)
        if self.world > 1:
            reshard(self.model)  # FSDP2 leaves the root unsharded after a forward without backward
        totals = self._all_reduce(totals)
        return float(totals[0] / totals[1])

    def state_dict(self) -> dict:
        """Inner optimizer (keyed by parameter name, portable across GPU counts), step, data position, scaler.

        Under FSDP the optimizer state is gathered to rank 0 (empty on other ranks); call on every rank.
        Tensors may alias the live optimizer state: save (serialise) the result before training on.
        """
        return {
            "optimizer": full_optimizer_state(self.model, self.optimizer),
            "step": self.step,
            "data_position": self.stream.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` saved; under FSDP every rank passes the same checkpoint (rank 0's
        optimizer state is the one broadcast)."""
        load_full_optimizer_state(self.model, self.optimizer, state["optimizer"])
        self.step = int(state["step"])
        self.stream.load_state_dict(state["data_position"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
