"""What a client trains on, batch by batch: seeded, resumable streams over a site's loaded data.

`TokenStream` cuts text tokens into windows; `ExampleStream` serves prompt/completion examples one per row
with the loss on the completion only. Both keep their whole state in a position (epoch, index) that the
client checkpoint saves, and under FSDP every rank draws the same global batch and keeps its own rows.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

import numpy as np
import torch

from client_agent.data.batch import MaskedBatch
from client_agent.data.files import Examples, Fit, TrainingData
from client_agent.data.records import DataError

log = logging.getLogger(__name__)


def part_of_tokens(tokens: np.ndarray, index: int, n: int) -> np.ndarray:
    """Contiguous `index`-th of `n` equal slices (an IID split when a source cannot be split by file)."""
    if not 0 <= index < n:
        raise DataError(f"part index {index} out of range for {n} parts")
    return tokens[index * tokens.size // n : (index + 1) * tokens.size // n]


def split_tail(tokens: np.ndarray, fraction: float, min_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, eval): the last `fraction` of the tokens (at least `min_tokens`) held out for evaluation."""
    if not 0 < fraction < 1:
        raise DataError(f"eval fraction must be in (0, 1), got {fraction}")
    n_eval = max(int(tokens.size * fraction), min_tokens)
    if tokens.size - n_eval < min_tokens:
        raise DataError(f"{tokens.size} tokens are too few to hold out {n_eval} for evaluation and train")
    return tokens[: tokens.size - n_eval], tokens[tokens.size - n_eval :]


def rank_rows(batch_size: int, rank: int, world: int) -> slice:
    """Rows of a global batch that `rank` of `world` trains on: contiguous, sizes differing by at most one."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} out of range for world size {world}")
    return slice(batch_size * rank // world, batch_size * (rank + 1) // world)


class _Epochs(ABC):
    """A seeded visiting order per epoch (of windows or examples) and the resumable position (epoch, index).

    Under FSDP every rank draws the same global batch and keeps only its rows (`rank_rows`), so the
    positions agree across ranks.
    """

    seed: int
    epoch: int
    index: int

    @abstractmethod
    def _order(self, epoch: int) -> np.ndarray:
        """What `epoch` visits, in order."""

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, index of the next entry within the epoch)."""
        return self.epoch, self.index

    def _take(self, need: int) -> np.ndarray:
        """The next `need` entries of the visiting order, crossing into later epochs as they run out."""
        chunks = []
        while need:
            order = self._order(self.epoch)
            take = order[self.index : self.index + need]
            chunks.append(take)
            need -= take.size
            self.index += take.size
            if self.index == order.size:
                self.epoch, self.index = self.epoch + 1, 0
        return np.concatenate(chunks)

    def _resume(self, state: dict[str, int], identity: dict[str, int]) -> None:
        """Resume at a saved position; refuse one whose `identity` values (seed, sizes) differ from ours."""
        for key, mine in identity.items():
            if int(state[key]) != mine:
                raise DataError(f"data position was saved with {key}={int(state[key])}; here it is {mine}")
        epoch, index = int(state["epoch"]), int(state["index"])
        if epoch < 0 or not 0 <= index < self._order(epoch).size:
            raise DataError(f"data position ({epoch}, {index}) is outside the data")
        self.epoch, self.index = epoch, index


class TokenStream(_Epochs):
    """Seeded random windows of `block_size + 1` tokens with a resumable position (epoch, index).

    Each epoch lays a grid of windows over the tokens at a seeded offset and visits them in a seeded
    permutation, so an epoch sees every window once. The position is all the state: saving it in the
    client checkpoint (§III-B4) lets a relaunched client continue with exactly the batches it would
    have drawn, neither repeating nor skipping data. Under FSDP every rank draws the same global batch
    and keeps only its rows (`rank_rows`), so the positions agree across ranks.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        block_size: int,
        seed: int = 0,
        *,
        eval_tokens: np.ndarray | None = None,
        eval_fraction: float = 0.05,
    ) -> None:
        if block_size < 1:
            raise DataError(f"block_size must be >= 1, got {block_size}")
        tokens = np.asarray(tokens)
        if tokens.ndim != 1:
            raise DataError(f"tokens must be 1-D, got shape {tokens.shape}")
        if eval_tokens is None:
            tokens, eval_tokens = split_tail(tokens, eval_fraction, block_size + 1)
        for what, arr in (("training", tokens), ("evaluation", eval_tokens)):
            if arr.size < block_size + 1:
                raise DataError(f"{arr.size} {what} tokens are fewer than one window of {block_size + 1}")
        self.tokens, self.eval_tokens = tokens, np.asarray(eval_tokens)
        self.block_size, self.seed = block_size, seed
        self.epoch, self.index = 0, 0
        self._window = np.arange(block_size + 1, dtype=np.int64)
        self._epoch_cache: tuple[int, np.ndarray] | None = None

    def _epoch_starts(self, epoch: int) -> np.ndarray:
        """Window start offsets of `epoch`, in visiting order."""
        if self._epoch_cache is not None and self._epoch_cache[0] == epoch:
            return self._epoch_cache[1]
        rng = np.random.default_rng([self.seed, epoch])
        T, n_tok = self.block_size, self.tokens.size
        offset = int(rng.integers(0, min(T - 1, n_tok - T - 1) + 1))
        n_windows = (n_tok - 1 - offset) // T
        starts = offset + rng.permutation(n_windows).astype(np.int64) * T
        self._epoch_cache = (epoch, starts)
        return starts

    def _order(self, epoch: int) -> np.ndarray:
        return self._epoch_starts(epoch)

    def _gather(self, tokens: np.ndarray, starts: np.ndarray) -> torch.Tensor:
        """LongTensor [len(starts), T+1] of the windows at `starts`, one vectorised gather."""
        return torch.from_numpy(tokens[starts[:, None] + self._window].astype(np.int64))

    def next_batch(self, batch_size: int, rank: int = 0, world: int = 1) -> torch.Tensor:
        """The next global batch of `batch_size` windows; this rank's rows of it, LongTensor [b, T+1]."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        rows = rank_rows(batch_size, rank, world)
        return self._gather(self.tokens, self._take(batch_size)[rows])

    def eval_batches(self, n: int, batch_size: int, rank: int = 0, world: int = 1) -> list[torch.Tensor]:
        """`n` fixed batches of evenly spaced held-out windows, the same every call (comparable losses)."""
        if n < 1 or batch_size < 1:
            raise ValueError(f"need n >= 1 and batch_size >= 1, got n={n}, batch_size={batch_size}")
        last = self.eval_tokens.size - self.block_size - 1
        starts = np.linspace(0, last, n * batch_size).round().astype(np.int64).reshape(n, batch_size)
        rows = rank_rows(batch_size, rank, world)
        return [self._gather(self.eval_tokens, s[rows]) for s in starts]

    def state_dict(self) -> dict[str, int]:
        """The position plus what it is only valid for (seed, window, data size)."""
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "block_size": self.block_size,
            "num_tokens": int(self.tokens.size),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at a saved position; refuse one taken on other data, seed or window size."""
        if state.get("kind", "tokens") != "tokens":
            raise DataError("data position was saved on prompt/completion examples; here the data are text")
        self._resume(state, {"seed": self.seed, "block_size": self.block_size, "num_tokens": int(self.tokens.size)})


class ExampleStream(_Epochs):
    """Seeded prompt/completion examples, one per row of `block_size + 1` tokens, with their loss mask.

    A row is the example's ids (prompt, completion, EOS) padded after the EOS with EOS; an example longer
    than the row loses the start of its prompt (at least one prompt token stays; counted once in an
    `event=examples_cut` line), and data with an example whose completion and EOS alone do not fit after
    that token is refused with the count and the first one's file and line (`Fit`). The counted targets are
    the completion's tokens and the EOS. The last `eval_fraction` of the examples (at least one) is held
    out unless `eval_examples` are given. Each epoch visits every training example once in a seeded
    permutation; position, resumption, FSDP rows and fixed held-out batches work as `TokenStream`'s.
    """

    def __init__(
        self,
        examples: Examples,
        block_size: int,
        seed: int = 0,
        *,
        eval_examples: Examples | None = None,
        eval_fraction: float = 0.05,
    ) -> None:
        if block_size < 1:
            raise DataError(f"block_size must be >= 1, got {block_size}")
        if eval_examples is None:
            if not 0 < eval_fraction < 1:
                raise DataError(f"eval fraction must be in (0, 1), got {eval_fraction}")
            n = len(examples)
            n_eval = max(int(n * eval_fraction), 1)
            if n - n_eval < 1:
                raise DataError(f"{n} examples are too few to hold out {n_eval} for evaluation and train")
            examples, eval_examples = examples.part(0, n - n_eval), examples.part(n - n_eval, n)
        for what, ex in (("training", examples), ("evaluation", eval_examples)):
            if not len(ex):
                raise DataError(f"no {what} examples")
        fit = Fit.of(examples, block_size)
        if eval_examples is not examples:  # an evaluator scores the data it holds out: count it once
            fit = fit + Fit.of(eval_examples, block_size)
        if fit.unfit:
            raise DataError(fit.refusal(block_size))
        if fit.cut:
            log.info(fit.log_line(block_size))
        self.examples, self.eval_examples = examples, eval_examples
        self.block_size, self.seed = block_size, seed
        self.epoch, self.index = 0, 0
        self._row = np.arange(block_size + 1, dtype=np.int64)
        self._epoch_cache: tuple[int, np.ndarray] | None = None

    def _order(self, epoch: int) -> np.ndarray:
        """Example indices of `epoch`, in visiting order."""
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.examples)).astype(np.int64)
            self._epoch_cache = (epoch, order)
        return self._epoch_cache[1]

    def _rows(self, ex: Examples, picked: np.ndarray, rows: slice) -> MaskedBatch:
        """The batch of examples `picked` (a global batch), this rank's `rows` of it."""
        total = int(ex.counted[picked].sum())
        picked = picked[rows]
        start, length, prompt = ex.starts[picked], ex.lengths[picked], ex.prompt_lens[picked]
        cut = np.maximum(length - (self.block_size + 1), 0)  # prompt tokens dropped from the left
        kept = length - cut
        source = (start + cut)[:, None] + np.minimum(self._row[None, :], (kept - 1)[:, None])  # pad: the EOS again
        target = self._row[None, 1:]  # target j is row token j + 1
        mask = (target >= (prompt - cut)[:, None]) & (target < kept[:, None])
        return MaskedBatch(torch.from_numpy(ex.tokens[source].astype(np.int64)), torch.from_numpy(mask), total)

    def next_batch(self, batch_size: int, rank: int = 0, world: int = 1) -> MaskedBatch:
        """The next global batch of `batch_size` examples; this rank's rows of it ([b, T+1] and mask [b, T])."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        rows = rank_rows(batch_size, rank, world)
        return self._rows(self.examples, self._take(batch_size), rows)

    def eval_batches(self, n: int, batch_size: int, rank: int = 0, world: int = 1) -> list[MaskedBatch]:
        """`n` fixed batches of evenly spaced held-out examples, the same every call (comparable losses)."""
        if n < 1 or batch_size < 1:
            raise ValueError(f"need n >= 1 and batch_size >= 1, got n={n}, batch_size={batch_size}")
        last = len(self.eval_examples) - 1
        picks = np.linspace(0, last, n * batch_size).round().astype(np.int64).reshape(n, batch_size)
        rows = rank_rows(batch_size, rank, world)
        return [self._rows(self.eval_examples, p, rows) for p in picks]

    def state_dict(self) -> dict[str, int | str]:
        """The position plus what it is only valid for (seed, row size, number of examples)."""
        return {
            "kind": "examples",
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "block_size": self.block_size,
            "num_examples": len(self.examples),
        }

    def load_state_dict(self, state: dict[str, int | str]) -> None:
        """Resume at a saved position; refuse one taken on other data, seed or row size."""
        if state.get("kind") != "examples":
            raise DataError("data position was saved on text data; here the data are prompt/completion examples")
        self._resume(state, {"seed": self.seed, "block_size": self.block_size, "num_examples": len(self.examples)})


Stream = TokenStream | ExampleStream


def open_stream(
    data: TrainingData,
    block_size: int,
    seed: int = 0,
    *,
    eval_data: TrainingData | None = None,
    eval_fraction: float = 0.05,
) -> Stream:
    """The stream for loaded data: `ExampleStream` for prompt/completion examples, else `TokenStream`.

    Held out: `eval_data` when given (of the same kind), else the last `eval_fraction` of `data`.
    """
    if isinstance(data, Examples):
        if eval_data is not None and not isinstance(eval_data, Examples):
            raise DataError("training data are prompt/completion examples but the evaluation data are text")
        return ExampleStream(data, block_size, seed, eval_examples=eval_data, eval_fraction=eval_fraction)
    if isinstance(eval_data, Examples):
        raise DataError("training data are text but the evaluation data are prompt/completion examples")
    return TokenStream(data, block_size, seed, eval_tokens=eval_data, eval_fraction=eval_fraction)
