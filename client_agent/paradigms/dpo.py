"""Federated DPO, client half: LoRA's adapters, trained by the DPO loss on (prompt, chosen, rejected) pairs.

A completion's log-probability is the sum over its tokens (and the EOS that ends it) of log p(token | what
precedes it). The policy is the model with its adapters, the reference the same model with them off (the
frozen base every client builds alike), so a pair's reference log-probabilities do not change during a
run: they are computed once per pair, on first use, and cached. With margin = (π_c − ref_c) − (π_r − ref_r)
the loss is −log σ(β·margin) (`sigmoid`, DPO) or (margin − 1/(2β))² (`ipo`).

The pairs are the client's own training examples: the data reader reads a preference record
(`client_agent.data.records`) as the example (prompt, chosen), and the record it was read from (its file and
line) gives the pair back (`read_preferences`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from geofed.config import FederationConfig
from geofed.paradigms.dpo import DPOSettings

from ..data.records import DataError, Preference, json_lines, read_preference
from ..training.trainer import LocalTrainer, TrainStats, scheduled_lr
from .base import ParadigmError
from .lora import LoRA

TensorPair = tuple[torch.Tensor, torch.Tensor]


def read_preferences(path: str | Path) -> list[Preference]:
    """Every preference record of a JSONL file; a DataError naming file:line, or the file when it holds none."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    out = [read_preference(record, where) for record, where, _ in json_lines(raw, path)]
    if not out:
        raise DataError(f"{path}: holds no preference record")
    return out


# ---- the loss ---------------------------------------------------------------------------------------


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float, kind: str = "sigmoid") -> torch.Tensor:
    """The mean loss over pairs from summed completion log-probabilities (each [n])."""
    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    if kind == "sigmoid":
        return -F.logsigmoid(beta * margin).mean()
    if kind == "ipo":
        return ((margin - 1 / (2 * beta)) ** 2).mean()
    raise ValueError(f"paradigm.loss {kind!r} is not sigmoid or ipo")


def rows(tokenizer: object, prompt: str, completions: Sequence[str], block_size: int) -> TensorPair:
    """(ids [n, T+1], mask [n, T]) of prompt + completion + EOS per completion, padded with EOS; the mask
    marks the targets that are the completion's tokens and its EOS. A row longer than `block_size + 1`
    loses the start of its prompt (one prompt token stays); a completion that cannot fit is refused."""
    eos = int(tokenizer.eos_id)
    prompt_ids = [int(t) for t in tokenizer.encode(prompt)]
    built = []
    for text in completions:
        completion = [int(t) for t in tokenizer.encode(text)] + [eos]
        if len(completion) > block_size:
            raise DataError(f"a completion of {len(completion)} tokens cannot fit model.block_size {block_size}")
        keep = max(1, block_size + 1 - len(completion))
        built.append((prompt_ids[-keep:], completion))
    width = max(len(p) + len(c) for p, c in built)
    ids = torch.full((len(built), width), eos, dtype=torch.long)
    mask = torch.zeros((len(built), width - 1), dtype=torch.bool)
    for i, (p, c) in enumerate(built):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        mask[i, len(p) - 1 : len(p) + len(c) - 1] = True  # target j is token j + 1
    return ids, mask


def completion_logprobs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ log p(target) over each row's masked targets: [n]."""
    logits = model(input_ids=ids[:, :-1], use_cache=False).logits.float()
    picked = torch.gather(F.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum(dim=1)


@contextmanager
def reference(model: nn.Module) -> Iterator[None]:
    """The reference policy: the model with its adapters off (peft's `disable_adapter`), no gradients."""
    with model.disable_adapter(), torch.no_grad():
        yield


@dataclass(frozen=True)
class Encoded:
    """Pairs tokenised as a chosen row and a rejected row each: ids [n, T+1] and target masks [n, T]."""

    chosen: torch.Tensor
    chosen_mask: torch.Tensor
    rejected: torch.Tensor
    rejected_mask: torch.Tensor

    @classmethod
    def of(cls, pairs: Sequence[Preference], tokenizer: object, block_size: int) -> Encoded:
        per_pair = []
        for p in pairs:
            try:
                per_pair.append(rows(tokenizer, p.prompt, [p.chosen, p.rejected], block_size))
            except DataError as exc:
                raise DataError(f"{p.where}: {exc}" if p.where else str(exc)) from None
        width = max(ids.shape[1] for ids, _ in per_pair)
        ids = torch.full((2 * len(pairs), width), int(tokenizer.eos_id), dtype=torch.long)
        mask = torch.zeros((2 * len(pairs), width - 1), dtype=torch.bool)
        for i, (pair_ids, pair_mask) in enumerate(per_pair):
            ids[2 * i : 2 * i + 2, : pair_ids.shape[1]] = pair_ids
            mask[2 * i : 2 * i + 2, : pair_mask.shape[1]] = pair_mask
        return cls(ids[0::2], mask[0::2], ids[1::2], mask[1::2])

    def __len__(self) -> int:
        return self.chosen.shape[0]

    def logprobs(self, model: nn.Module, picked: torch.Tensor, device: torch.device) -> TensorPair:
        """(chosen, rejected) summed log-probabilities of the `picked` pairs, in one forward pass."""
        ids = torch.cat([self.chosen[picked], self.rejected[picked]]).to(device)
        mask = torch.cat([self.chosen_mask[picked], self.rejected_mask[picked]]).to(device)
        both = completion_logprobs(model, ids, mask)
        return both[: len(picked)], both[len(picked) :]

    def reference_logprobs(self, model: nn.Module, device: torch.device, batch: int = 32) -> TensorPair:
        """Every pair's (chosen, rejected) log-probabilities under the reference, on the CPU."""
        out_c, out_r = [], []
        was_training = model.training
        model.eval()  # dropout off: the reference is a fixed function
        with reference(model):
            for lo in range(0, len(self), batch):
                c, r = self.logprobs(model, torch.arange(lo, min(lo + batch, len(self))), device)
                out_c.append(c.cpu())
                out_r.append(r.cpu())
        model.train(was_training)
        return torch.cat(out_c), torch.cat(out_r)


def preference_scores(model: nn.Module, pairs: Encoded, ref: TensorPair, beta: float, device: torch.device,
                      batch: int = 32) -> tuple[float, float]:
    """(accuracy %, mean reward margin) of `model` on `pairs` whose reference log-probabilities are `ref`: the
    share of pairs whose chosen completion the policy finds likelier than the rejected one, and the mean of
    β·((π_c − ref_c) − (π_r − ref_r)). Dropout off; the caller's training mode is restored."""
    was_training = model.training
    model.eval()
    pol_c, pol_r = [], []
    with torch.no_grad():
        for lo in range(0, len(pairs), batch):
            c, r = pairs.logprobs(model, torch.arange(lo, min(lo + batch, len(pairs))), device)
            pol_c.append(c.cpu())
            pol_r.append(r.cpu())
    model.train(was_training)
    policy_c, policy_r = torch.cat(pol_c), torch.cat(pol_r)
    margin = beta * ((policy_c - ref[0]) - (policy_r - ref[1]))
    return 100.0 * float((policy_c > policy_r).float().mean()), float(margin.mean())


def _records_of(examples) -> list[Preference]:
    """The preference record behind each of `examples` (its file and line), in order."""
    by_file = {f: {p.where: p for p in read_preferences(f)} for f in examples.files}
    pairs = []
    for file_index, line in examples.origins:
        path = examples.files[int(file_index)]
        pairs.append(by_file[path].get(f"{path}:{int(line)}"))
    missing = [examples.where(i) for i, p in enumerate(pairs) if p is None]
    if missing:
        raise DataError(f"{missing[0]}: no preference record")
    return pairs


class DPO(LoRA):
    """LoRA's adapters and exchange; the local loop minimises the DPO loss against the frozen base."""

    settings: DPOSettings
    preference_data: ClassVar[bool] = True

    def __init__(self, settings: DPOSettings) -> None:
        super().__init__(settings)
        self._fed: FederationConfig | None = None
        self._pairs: Encoded | None = None
        self._ref: TensorPair | None = None
        self._held: tuple[Encoded, TensorPair] | None = None  # the held-out pairs and their reference, once

    def build(self, fed: FederationConfig, *, initialise: bool) -> nn.Module:
        self._fed = fed  # the tokenizer and block size the pairs are encoded with
        return super().build(fed, initialise=initialise)

    def _training_pairs(self, trainer: LocalTrainer) -> list[Preference]:
        """The preference records of the stream's training examples (their file and line)."""
        examples = getattr(trainer.stream, "examples", None)
        if examples is None or not examples.preferences:
            raise ParadigmError("paradigm 'dpo' trains on preference records (prompt, chosen, rejected); "
                                "this client's data holds none")
        return _records_of(examples)

    def _encode(self, pairs: Sequence[Preference]) -> Encoded:
        from ..data.tokenizer import load_tokenizer

        if self._fed is None:
            raise ParadigmError("paradigm 'dpo' needs its model built by its own build()")
        return Encoded.of(pairs, load_tokenizer(self._fed.model.tokenizer), self._fed.model.block_size)

    def eval_metrics(self, trainer: LocalTrainer) -> dict[str, float]:
        """Preference accuracy (%) and mean reward margin on the stream's held-out preference records."""
        held = getattr(trainer.stream, "eval_examples", None)
        if held is None or not held.preferences or not len(held):
            return {}
        if self._held is None:
            pairs = self._encode(_records_of(held))
            self._held = pairs, pairs.reference_logprobs(trainer.model, trainer.device)
        accuracy, margin = preference_scores(trainer.model, *self._held, self.settings.beta, trainer.device)
        return {"preference_accuracy": accuracy, "reward_margin": margin}

    def local_update(self, trainer: LocalTrainer, steps: int, deadline: float | None, version: int) -> TrainStats:
        s, cfg, model, device = self.settings, trainer.cfg, trainer.model, trainer.device
        if self._pairs is None:
            self._pairs = self._encode(self._training_pairs(trainer))
            self._ref = self._pairs.reference_logprobs(model, device)
        pairs, (ref_c, ref_r) = self._pairs, self._ref
        rng = np.random.default_rng([trainer.stream.seed, version])
        model.train()
        t0, losses, tokens, done, stopped, norm = time.monotonic(), [], 0, 0, "steps", 0.0
        lr = cfg.lr
        for _ in range(steps):
            if deadline is not None and trainer.clock() >= deadline:
                stopped = "deadline"
                break
            lr = scheduled_lr(trainer.step, cfg, trainer.run_progress())
            for group in trainer.optimizer.param_groups:
                group["lr"] = lr
            picked = torch.from_numpy(rng.choice(len(pairs), size=min(cfg.batch_size, len(pairs)), replace=False))
            policy_c, policy_r = pairs.logprobs(model, picked, device)
            loss = dpo_loss(policy_c, policy_r, ref_c[picked].to(device), ref_r[picked].to(device), s.beta, s.loss)
            trainer.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf))
            if math.isfinite(norm):
                trainer.optimizer.step()
            trainer.step += 1
            done += 1
            losses.append(float(loss))
            tokens += int(pairs.chosen_mask[picked].sum() + pairs.rejected_mask[picked].sum())
        seconds = time.monotonic() - t0
        return TrainStats(steps=done, tokens=tokens, samples=done * cfg.batch_size,
                          mean_loss=float(np.mean(losses)) if losses else float("nan"),
                          tokens_per_s=tokens / seconds if seconds > 0 else 0.0, seconds=seconds,
                          stopped_by=stopped, lr=lr, grad_norm=norm)
