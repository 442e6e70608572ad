"""A training batch: rows of `T + 1` token ids, and for prompt/completion data which targets the loss counts.

A plain batch is a LongTensor [B, T+1] whose every next-token target counts (text data). A `MaskedBatch`
adds a target mask [B, T] (prompt/completion data: only the completion and its EOS count) and the number
of counted targets in the whole global batch its rows were cut from, so that micro-batches and FSDP ranks
weigh their losses into one mean over every counted target of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class MaskedBatch:
    """Token rows [B, T+1], the mask [B, T] of the targets `tokens[:, 1:]` the loss counts, and `total`:
    the counted targets of the global batch these rows belong to (the same on every rank)."""

    tokens: torch.Tensor
    mask: torch.Tensor
    total: int

    def __post_init__(self) -> None:
        rows, width = self.tokens.shape
        if self.mask.dtype != torch.bool or tuple(self.mask.shape) != (rows, width - 1):
            raise ValueError(f"mask must be bool [{rows}, {width - 1}], got {self.mask.dtype} {tuple(self.mask.shape)}")

    @property
    def shape(self) -> torch.Size:
        """The token rows' shape, [B, T+1]."""
        return self.tokens.shape

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, rows: slice) -> MaskedBatch:
        """Some rows, the global count kept."""
        return MaskedBatch(self.tokens[rows], self.mask[rows], self.total)

    def to(self, device: torch.device | str, *, non_blocking: bool = False, copy: bool = False) -> MaskedBatch:
        """Tokens and mask on `device`."""
        return MaskedBatch(
            self.tokens.to(device, non_blocking=non_blocking, copy=copy),
            self.mask.to(device, non_blocking=non_blocking, copy=copy),
            self.total,
        )


Batch = torch.Tensor | MaskedBatch


def batch_tokens(batch: Batch) -> torch.Tensor:
    """The token rows [B, T+1] of either kind of batch."""
    return batch.tokens if isinstance(batch, MaskedBatch) else batch


def batch_weight(batch: Batch) -> int:
    """What a batch's mean loss is weighted by when several are averaged: its rows for a plain batch (each
    has T targets), its counted targets for a masked one. Read it before moving a masked batch off the CPU."""
    if isinstance(batch, MaskedBatch):
        return int(batch.mask.sum())
    return int(batch.shape[0])


def global_weight(batch: Batch, batch_size: int) -> int:
    """The weight of the whole global batch that `batch` is a rank's or micro-step's rows of."""
    return batch.total if isinstance(batch, MaskedBatch) else batch_size


def stand_in(batch: Batch) -> Batch:
    """One row of zeros shaped like `batch`'s, counting no target (a zero-weight pass with no rows to run)."""
    tokens = torch.zeros(1, batch.shape[1], dtype=batch_tokens(batch).dtype)
    if isinstance(batch, MaskedBatch):
        return MaskedBatch(tokens, torch.zeros(1, batch.shape[1] - 1, dtype=torch.bool), batch.total)
    return tokens


def next_token_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Cross-entropy of `logits` [B, T, V] (the model's output on `batch`'s inputs) against its targets.

    A plain batch: the mean over every target. A masked batch: the mean over its counted targets (0 when
    it counts none, so a stand-in row adds nothing and no NaN).
    """
    targets = batch_tokens(batch)[:, 1:]
    flat = logits.float().reshape(-1, logits.shape[-1])
    if not isinstance(batch, MaskedBatch):
        return F.cross_entropy(flat, targets.reshape(-1))
    masked = targets.masked_fill(~batch.mask, -100).reshape(-1)
    total = F.cross_entropy(flat, masked, ignore_index=-100, reduction="sum")
    return total / batch.mask.sum().clamp_min(1)
