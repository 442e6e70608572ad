"""Mixed precision and micro-batch size chosen per device (paper §III, Client; §III-C2 pretraining).

Sites mix H100s, RTX 3090s and V100s: bf16 where the GPU supports it, fp16 with a gradient scaler
on older GPUs, fp32 on CPU. Master weights and the exchanged deltas stay fp32 either way, so mixed
precision never leaks into aggregation. The micro-batch is the largest that fits; gradient
accumulation keeps the effective batch identical on every client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

PrecisionName = Literal["fp32", "bf16", "fp16"]
CPU_MICRO_BATCH_CAP = 8


class PrecisionError(ValueError):
    """A precision the device cannot run; one readable line."""


class DeviceMemoryError(RuntimeError):
    """The model with its optimizer state does not fit the device at any micro-batch."""


@dataclass(frozen=True)
class Precision:
    """The compute dtype of forward/backward and whether the loss needs scaling (fp16 only)."""

    name: PrecisionName
    dtype: torch.dtype

    @property
    def use_scaler(self) -> bool:
        """fp16 gradients underflow without loss scaling; bf16 and fp32 do not need it."""
        return self.name == "fp16"


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", torch.float32),
    "bf16": Precision("bf16", torch.bfloat16),
    "fp16": Precision("fp16", torch.float16),
}


def _cuda_bf16(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def pick_precision(requested: str, device: torch.device | str) -> Precision:
    """Honour `TrainingConfig.precision`; "auto" = bf16 on bf16 GPUs, fp16 on older GPUs, fp32 elsewhere."""
    device = torch.device(device)
    if requested == "auto":
        if device.type == "cuda":
            return PRECISIONS["bf16" if _cuda_bf16(device) else "fp16"]
        return PRECISIONS["fp32"]
    if requested not in PRECISIONS:
        raise PrecisionError(f"unknown precision {requested!r}; expected auto, fp32, bf16 or fp16")
    if requested == "fp16" and device.type != "cuda":
        raise PrecisionError(f"fp16 training needs a CUDA device, not {device.type}")
    if requested == "bf16" and device.type == "cuda" and not _cuda_bf16(device):
        raise PrecisionError(f"GPU {torch.cuda.get_device_name(device)} does not support bf16; use fp16")
    return PRECISIONS[requested]


def autocast(precision: Precision, device: torch.device | str) -> contextlib.AbstractContextManager:
    """Autocast to the precision's dtype, or a no-op context for fp32."""
    device = torch.device(device)
    if precision.name == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=precision.dtype)


def grad_scaler(precision: Precision, device: torch.device | str, distributed: bool = False) -> torch.amp.GradScaler:
    """A GradScaler live for fp16 and a pass-through (enabled=False) otherwise.

    Sharded training needs `ShardedGradScaler`: ranks agree on inf/NaN, so all skip a step together.
    """
    kind = torch.device(device).type
    if distributed and precision.use_scaler:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(kind, enabled=True)
    return torch.amp.GradScaler(kind, enabled=precision.use_scaler)


def local_numel(param: torch.Tensor) -> int:
    """Elements this rank stores of `param`: its shard (a DTensor's local part) or the whole tensor."""
    return param.to_local().numel() if hasattr(param, "to_local") else param.numel()


def adamw_state_numel(model: nn.Module) -> int:
    """fp32 elements of AdamW's two moments on this rank: twice the trainable elements it stores."""
    return 2 * sum(local_numel(p) for p in model.parameters() if p.requires_grad)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


@contextlib.contextmanager
def _optimizer_headroom(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Hold memory for AdamW's two fp32 moments while probing, so the chosen micro-batch still fits later.

    Under FSDP each rank keeps the moments of its shards only, so only the shards' size is reserved.
    """
    reserve = torch.empty(adamw_state_numel(model), dtype=torch.float32, device=device)
    try:
        yield
    finally:
        del reserve


def _probe(model: nn.Module, micro: int, block_size: int, device: torch.device, precision: Precision) -> None:
    """One forward/backward on random tokens at `micro` sequences; raises on out-of-memory."""
    from client_agent.training.model import lm_loss

    vocab = model.get_input_embeddings().num_embeddings
    batch = torch.randint(0, vocab, (micro, block_size + 1), device=device)
    try:
        with autocast(precision, device):
            loss = lm_loss(model, batch)
        loss.backward()
    finally:
        model.zero_grad(set_to_none=True)


def largest_fitting(
    target: int,
    fits: Callable[[int], None],
    cleanup: Callable[[], None],
    where: str,
    agree: Callable[[bool], bool] = bool,
) -> int:
    """Try `fits(micro)` from `target`, halving after each out-of-memory error; the first size that runs.

    `agree(ok)` turns this process's outcome into the group's (all ranks of an FSDP client must try
    the same sizes, since each try is a sharded forward/backward: any rank out of memory halves all).
    """
    micro = target
    while True:
        error = None
        try:
            fits(micro)
        except RuntimeError as exc:
            if not _is_oom(exc):
                raise
            error = exc
        if agree(error is None):
            return micro
        if micro == 1:
            raise DeviceMemoryError(f"the model does not fit {where} even at micro-batch 1") from error
        cleanup()
        micro //= 2


def pick_micro_batch(
    model: nn.Module,
    block_size: int,
    device: torch.device | str,
    target_batch: int,
    precision: Precision | None = None,
    agree: Callable[[bool], bool] = bool,
) -> int:
    """Largest micro-batch (≤ target) whose forward/backward fits; accumulation steps = ceil(batch / micro).

    On CUDA, probe `target_batch`, then halve on out-of-memory down to 1, with AdamW's state reserved;
    under FSDP `agree` makes every rank halve when any rank ran out of memory (see `largest_fitting`).
    On CPU memory is rarely the limit and larger batches only add latency: cap at `CPU_MICRO_BATCH_CAP`.
    """
    if target_batch < 1:
        raise ValueError(f"target_batch must be >= 1, got {target_batch}")
    device = torch.device(device)
    if device.type != "cuda":
        return min(target_batch, CPU_MICRO_BATCH_CAP)
    precision = precision or pick_precision("auto", device)

    def fits(micro: int) -> None:
        with _optimizer_headroom(model, device), torch.random.fork_rng(devices=[device]):
            _probe(model, micro, block_size, device, precision)

    where = f"on {device} with block_size {block_size}"
    return largest_fitting(target_batch, fits, torch.cuda.empty_cache, where, agree)
