"""The client's local loop (Algorithm 1: update locally until H steps or timeout T, whichever first).

The inner AdamW lives here and survives across rounds: Algorithm 1 keeps the inner optimizer state on
the client, and only the parameter delta crosses the WAN. Every step covers exactly `batch_size`
sequences whatever the device's micro-batch, by gradient accumulation (§III-C2), so a V100 client and
an H100 client do the same work per step and their deltas weigh alike at the PS.

Under FSDP the micro-batch plan is global: every rank runs the same number of forward/backward passes
per step (its collectives must pair up with the other ranks'), and a rank with no rows left for a
micro-step joins it with a zero-weight pass. A step whose gradient is not finite is skipped, as
GradScaler skips an fp16 overflow; only a round in which every step was skipped is an error.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from client_agent.data.batch import Batch, batch_weight, global_weight, stand_in
from client_agent.data.streams import Stream, rank_rows
from client_agent.training.fsdp import full_optimizer_state, load_full_optimizer_state, reshard
from client_agent.training.lazy_dynamo import adamw
from client_agent.training.model import lm_loss
from client_agent.training.precision import Precision, autocast, grad_scaler, pick_micro_batch, pick_precision
from geofed.config import TrainingConfig


class NonFiniteLossError(RuntimeError):
    """Every step of a round had a non-finite loss or gradient: reset to the global model, do not push."""


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
    skipped_steps: int = 0  # steps whose gradient was not finite: data consumed, parameters left as they were

    @property
    def step_s(self) -> float | None:
        """Wall seconds per local step this round (slowdown included: it stands for a slower GPU); None: no step."""
        return self.seconds / self.steps if self.steps and self.seconds > 0 else None


def warmup_lr(step: int, base_lr: float, warmup_steps: int) -> float:
    """Linear warm-up over the first `warmup_steps` steps, then constant (rounds have no known end)."""
    if warmup_steps <= 0:
        return base_lr
    return base_lr * min(1.0, (step + 1) / warmup_steps)


def run_cosine(progress: float, base_lr: float, min_ratio: float) -> float:
    """Cosine from `base_lr` at progress 0 to `base_lr * min_ratio` at progress 1 (clamped to [0, 1])."""
    p = min(1.0, max(0.0, progress))
    floor = base_lr * min_ratio
    return floor + 0.5 * (1.0 + math.cos(math.pi * p)) * (base_lr - floor)


def scheduled_lr(step: int, cfg: TrainingConfig, progress: float | None = None) -> float:
    """The inner learning rate of `step`: warm-up, then constant or a cosine decay to a floor.

    Cosine by steps (`lr_schedule="cosine"`, `lr_progress="steps"`) runs from `lr` down to
    `lr * lr_min_ratio` over the `lr_decay_steps` steps after warm-up (`max_steps` when 0) and stays at the
    floor afterwards (nanoGPT's `get_lr`). Cosine by run time (`lr_progress="run_time"`) is the warm-up
    factor of the client's own `step` times the cosine of the federation's `progress` (0 to 1), which the
    caller must give.
    """
    if cfg.lr_progress == "run_time":
        if progress is None:
            raise ValueError("lr_progress 'run_time' needs the run's progress")
        return warmup_lr(step, 1.0, cfg.warmup_steps) * run_cosine(progress, cfg.lr, cfg.lr_min_ratio)
    lr = warmup_lr(step, cfg.lr, cfg.warmup_steps)
    if cfg.lr_schedule == "constant" or step < cfg.warmup_steps:
        return lr
    span = cfg.lr_decay_steps or max(1, cfg.max_steps - cfg.warmup_steps)
    return run_cosine((step - cfg.warmup_steps) / span, cfg.lr, cfg.lr_min_ratio)


def split_rows(rows: int, n: int) -> list[int]:
    """`rows` split into `n` near-equal parts, larger first; parts may be empty when rows < n."""
    if rows < 0 or n < 1:
        raise ValueError(f"need rows >= 0 and n >= 1, got rows={rows}, n={n}")
    return [rows // n + (1 if i < rows % n else 0) for i in range(n)]


def micro_batches(batch_size: int, micro: int) -> list[int]:
    """Split `batch_size` rows into ceil(batch_size / micro) micro-batches of near-equal size."""
    if batch_size < 1 or micro < 1:
        raise ValueError(f"batch_size and micro must be >= 1, got {batch_size} and {micro}")
    return split_rows(batch_size, -(-batch_size // micro))


def micro_plan(batch_size: int, micro: int, rank: int = 0, world: int = 1) -> list[int]:
    """Rows of each micro-step on `rank`: the same number of micro-steps on every rank of `world`.

    The count is set by the rank with the most rows (ceil(batch_size / world) split into micro-batches
    of at most `micro`), so FSDP's per-pass collectives match on every rank; a rank with fewer rows
    gets smaller micro-batches, or an empty one it must still run (with zero weight).
    """
    if batch_size < 1 or micro < 1:
        raise ValueError(f"batch_size and micro must be >= 1, got {batch_size} and {micro}")
    rows = rank_rows(batch_size, rank, world)
    most = -(-batch_size // world)
    return split_rows(rows.stop - rows.start, -(-most // micro))


def _param_groups(model: nn.Module, weight_decay: float, groups: str = "matrices") -> list[dict]:
    """`matrices`: decay 2-D+ parameters only, not biases, norms or other vectors (GPT-2/nanoGPT practice);
    `all`: decay every trained parameter."""
    params = [p for p in model.parameters() if p.requires_grad]
    if groups == "all":
        return [{"params": params, "weight_decay": weight_decay}]
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
        stream: Stream,
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
            most = -(-cfg.batch_size // world)  # the largest share of any rank
            micro = pick_micro_batch(model, stream.block_size, self.device, most, self.precision, self._all_agree)
        # Every rank must run the same plan: the smallest micro-batch any rank can hold (one rank may be
        # shorter of memory, or configured differently) sets it for all.
        self.micro_batch_size = int(self._all_reduce(torch.tensor(micro, device=self.device), "MIN").item())
        self.plan = micro_plan(cfg.batch_size, self.micro_batch_size, rank, world)
        self.optimizer = adamw(
            _param_groups(model, cfg.weight_decay, cfg.weight_decay_groups), lr=cfg.lr,
            betas=(cfg.adam_beta1, cfg.adam_beta2), eps=1e-8,
        )
        self.scaler = grad_scaler(self.precision, self.device, distributed=world > 1)
        self.slowdown, self.clock, self.sleep = slowdown, clock, sleep
        self.step = 0
        # The run's progress (0 to 1) for lr_progress run_time; under FSDP the largest of the ranks' (rank 0
        # holds the federation's clock, the others may answer 0).
        self.progress: Callable[[], float] | None = None

    @property
    def tokens_per_step(self) -> int:
        """Tokens one step trains on, across the site's ranks (what a delta's token count adds up)."""
        return self.cfg.batch_size * self.stream.block_size

    def run_progress(self) -> float | None:
        """The run's progress the schedule follows now; None unless lr_progress is run_time."""
        if self.cfg.lr_progress != "run_time":
            return None
        p = float(self.progress()) if self.progress is not None else 0.0
        if self.world > 1:
            p = float(self._all_reduce(torch.tensor(p, device=self.device), "MAX").item())
        return p

    def _set_lr(self) -> float:
        lr = scheduled_lr(self.step, self.cfg, self.run_progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _micro_steps(self, batch: Batch) -> Iterator[tuple[Batch, int]]:
        """(rows on the device, their weight) per micro-step of `self.plan`: the weight is the rows (text) or
        the counted targets (prompt/completion, `batch_weight`). An empty micro-step yields one stand-in row
        with weight 0, so this rank still runs the pass (and its collectives) at zero weight."""
        start = 0
        for size in self.plan:
            if size:
                chunk = batch[start : start + size]
            else:
                chunk = batch[:1] if batch.shape[0] else stand_in(batch)
            start += size
            yield chunk.to(self.device, non_blocking=True), batch_weight(chunk) if size else 0

    def _train_step(self) -> tuple[torch.Tensor, int, torch.Tensor, bool]:
        """One optimizer step over a full batch: (weighted loss sum on this rank, its weight, grad norm, applied).

        The step's loss is the mean over the global batch: over its rows for text, over its counted targets
        (every completion token and EOS of every row) for prompt/completion data. A step whose gradient norm
        is not finite leaves the parameters and AdamW's moments untouched (the norm is global under FSDP, so
        every rank skips together); GradScaler also lowers its scale.
        """
        batch = self.stream.next_batch(self.cfg.batch_size, self.rank, self.world)  # (rows, T+1)
        whole = global_weight(batch, self.cfg.batch_size)
        loss_sum, weight_sum = torch.zeros((), device=self.device), 0
        for chunk, weight in self._micro_steps(batch):
            with autocast(self.precision, self.device):
                loss = lm_loss(self.model, chunk)
            # Weight each micro-batch by its share of the global batch; FSDP averages ranks, hence × world.
            self.scaler.scale(loss * (weight * self.world / whole)).backward()
            loss_sum += loss.detach() * weight
            weight_sum += weight
        self.scaler.unscale_(self.optimizer)
        clip = self.cfg.grad_clip or math.inf  # 0 disables clipping; the norm is still measured
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        applied = bool(torch.isfinite(norm).item())
        if applied or self.scaler.is_enabled():
            self.scaler.step(self.optimizer)  # an enabled scaler skips the step itself when it found inf/NaN
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return loss_sum, weight_sum, norm, applied

    def _all_reduce(self, values: torch.Tensor, op: str = "SUM") -> torch.Tensor:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(values, op=getattr(dist.ReduceOp, op))
        return values

    def _all_agree(self, ok: bool) -> bool:
        """True on every rank when `ok` is true on every rank (one collective under FSDP)."""
        return bool(self._all_reduce(torch.tensor(int(ok), device=self.device), "MIN").item())

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
        start, steps, skipped, stopped_by = self.clock(), 0, 0, limit
        loss_sum = torch.zeros((), device=self.device)
        weight_sum = 0  # rows (text) or counted targets (prompt/completion) of the applied steps
        grad_norm = torch.zeros((), device=self.device)
        lr = self._set_lr()
        while steps < max_steps:
            if self._past(deadline):
                stopped_by = "deadline"
                break
            t0 = self.clock()
            lr = self._set_lr()
            step_loss, step_weight, norm, applied = self._train_step()
            if applied:
                loss_sum += step_loss
                weight_sum += step_weight
                grad_norm = norm
            else:
                skipped += 1
            steps += 1
            if self.slowdown > 1.0:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                extra = (self.slowdown - 1.0) * (self.clock() - t0)
                if deadline is not None:
                    extra = min(extra, max(0.0, deadline - self.clock()))
                self.sleep(extra)
        seconds = self.clock() - start
        applied = steps - skipped
        if steps and not applied:
            raise NonFiniteLossError(
                f"all {steps} steps up to step {self.step} had a non-finite loss or gradient; reload the global model"
            )
        totals = self._all_reduce(torch.stack([loss_sum, torch.tensor(float(weight_sum), device=self.device)]))
        mean_loss = float(totals[0] / totals[1]) if applied else math.nan
        samples = applied * self.cfg.batch_size  # what the delta holds: a skipped step changed nothing
        tokens = samples * self.stream.block_size
        return TrainStats(
            steps=steps,
            tokens=tokens,
            samples=samples,
            mean_loss=mean_loss,
            tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
            seconds=seconds,
            stopped_by=stopped_by,
            lr=lr,
            grad_norm=float(grad_norm),
            skipped_steps=skipped,
        )

    @torch.no_grad()
    def evaluate(self, n_batches: int) -> float:
        """Mean loss on the stream's fixed held-out batches (feeds the top-k checkpoint manager, §III-B4):
        per row for text, per counted target for prompt/completion data."""
        was_training = self.model.training
        self.model.eval()
        totals = torch.zeros(2, device=self.device)
        try:
            # Global eval batches of `batch_size` rows: the same held-out set whatever the GPU count.
            for batch in self.stream.eval_batches(n_batches, self.cfg.batch_size, self.rank, self.world):
                for chunk, weight in self._micro_steps(batch):  # the training plan: same passes on every rank
                    with autocast(self.precision, self.device):
                        loss = lm_loss(self.model, chunk)
                    totals[0] += loss.float() * weight
                    totals[1] += weight
        finally:
            self.model.train(was_training)
        if self.world > 1:
            reshard(self.model)  # FSDP2 leaves the root unsharded after a forward without backward
        totals = self._all_reduce(totals)
        return float(totals[0] / totals[1])

    def reset_optimizer(self) -> None:
        """Forget AdamW's moments and step counts (each adopted global model, when keep_optimizer_state is off)."""
        self.optimizer.state.clear()

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
        self.load_progress(state)

    def load_progress(self, state: dict) -> None:
        """Step, data position and scaler of `state_dict` (the optimizer restored elsewhere: a sharded
        checkpoint's moments are loaded by every rank for its own shards, `client_agent.training.slices.state`)."""
        self.step = int(state["step"])
        self.stream.load_state_dict(state["data_position"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
