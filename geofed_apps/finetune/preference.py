"""`geofed local --paradigm dpo`: the docstring task as preference pairs, and its held-out preference scores.

Each docstring pair becomes a preference record: the prompt, `chosen` its right answer, `rejected` the
answer of another pair of the same set (a different one, drawn by the split's seed). A client's data
reader takes each as the example (prompt, chosen) (`client_agent.data.records`), so the held-out eval loss is
the chosen answers' loss. The score, on the shared held-out pairs:

- preference accuracy: the share of pairs whose chosen completion the model finds likelier than the
  rejected one, log π(chosen) > log π(rejected) (summed over the completion's tokens). DPO's own accuracy,
  the share whose implicit reward margin is positive, is undefined before training (the policy is the
  reference, every margin is 0); this one is meaningful before and after.
- mean reward margin: β·[(log π(chosen) − log π_ref(chosen)) − (log π(rejected) − log π_ref(rejected))]
  averaged over the pairs; 0 for the base model.
- F1 (the built-in task only): the held-out pairs' greedy answers scored as the LoRA preset scores them
  (`answers.evaluate_answers`), so whether preferring the right answer also makes the model say it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from client_agent.paradigms.dpo import Encoded, Preference, preference_scores, read_preferences
from geofed.config import FederationConfig

from .task import QAPair, stdlib_qa_split
from .user_task import tokenizer_of


def preferences_of(pairs: Sequence[QAPair], rng: np.random.Generator) -> list[Preference]:
    """Each pair with its right answer chosen and another pair's (different) answer rejected."""
    answers = sorted({p.completion for p in pairs})
    if len(answers) < 2:
        raise ValueError(f"{len(pairs)} pairs with {len(answers)} distinct answer(s) make no preference pair")
    out = []
    for p in pairs:
        rejected = p.completion
        while rejected == p.completion:
            rejected = answers[int(rng.integers(len(answers)))]
        out.append(Preference(p.prompt, p.completion, rejected, ""))
    return out


def write_preferences(path: Path, prefs: Sequence[Preference]) -> Path:
    """JSONL preference records (prompt, chosen, rejected)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in prefs:
            f.write(json.dumps({"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected}) + "\n")
    return path


def _rng(seed: int, part: int) -> np.random.Generator:
    """The draw of part `part`'s rejected answers (client i's: i; the held-out set's: the client count)."""
    return np.random.default_rng([seed, part, 2])


@dataclass(frozen=True)
class UserPreferences:
    """`--data`'s preference records dealt to the clients, and the held-out ones (`--eval-data`'s, else a seeded
    `training.eval_fraction`)."""

    clients: tuple[tuple[Preference, ...], ...]
    eval: tuple[Preference, ...]
    held_out: str

    @classmethod
    def read(cls, data: str, eval_data: str | None, fed: FederationConfig, n_clients: int,
             seed: int) -> UserPreferences:
        """Every record of `data` and `eval_data` read and checked (a DataError naming file:line) and split."""
        from client_agent.data.files import DataError, collect_files

        def read_all(source: str) -> list[Preference]:
            prefs = [p for f in collect_files(source) for p in read_preferences(f)]
            Encoded.of(prefs, tokenizer_of(fed), fed.model.block_size)  # a completion too long is refused here
            return prefs

        prefs = read_all(data)
        order = np.random.default_rng(seed).permutation(len(prefs))
        if eval_data is not None:
            held, train = read_all(eval_data), [prefs[i] for i in order]
            held_out = f"{len(held)} pairs from {eval_data} (--eval-data)"
        else:
            n_eval = max(1, round(fed.training.eval_fraction * len(prefs)))
            held, train = [prefs[i] for i in sorted(order[:n_eval])], [prefs[i] for i in order[n_eval:]]
            held_out = f"{n_eval} of {len(prefs)} pairs of {data} (training.eval_fraction, seed {seed})"
        if len(train) < n_clients:
            raise DataError(f"{len(train)} training pairs in {data} are too few for {n_clients} clients")
        return cls(tuple(tuple(train[i::n_clients]) for i in range(n_clients)), tuple(held), held_out)

    def lines(self) -> list[str]:
        return [f"held out: {self.held_out}; {sum(map(len, self.clients))} pairs trained on by "
                f"{len(self.clients)} clients"]


@dataclass(frozen=True)
class PreferenceScores:
    """A model's held-out preference accuracy (%) and mean reward margin, and with the docstring task's
    answers its greedy answers' F1 (%)."""

    accuracy: float
    margin: float
    f1: float | None = None


@torch.no_grad()
def score_preferences(model: nn.Module, prefs: Sequence[Preference], tokenizer: object, block_size: int,
                      beta: float, batch: int = 32) -> PreferenceScores:
    """The preference accuracy and mean reward margin of `model` (peft-wrapped: its adapters off are the
    reference) on `prefs`."""
    model.eval()
    pairs = Encoded.of(prefs, tokenizer, block_size)
    device = next(model.parameters()).device
    ref = pairs.reference_logprobs(model, device, batch)
    return PreferenceScores(*preference_scores(model, pairs, ref, beta, device, batch))


@dataclass
class PreferenceTask:
    """The docstring task's split written as per-client preference JSONL, and its held-out scoring."""

    client_files: list[Path]
    eval_file: Path
    base_line: str = ""  # the base model's hash (`base_model.describe`), once scored
    answers: tuple[QAPair, ...] = ()  # the docstring task's held-out pairs behind `eval_file`: F1 is scored on them

    @classmethod
    def write(cls, out_dir: Path, n_clients: int, seed: int = 0, windows: bool = False,
              renamings: int = 0) -> PreferenceTask:
        """The docstring task's split of `seed` (`task.stdlib_qa_split`) as preference records under `out_dir`."""
        from client_agent.data.corpus import write_file_list

        split = stdlib_qa_split(n_clients, seed, windows, renamings)
        files = [write_preferences(out_dir / f"client-{i}.jsonl", preferences_of(pairs, _rng(seed, i)))
                 for i, pairs in enumerate(split.clients)]
        held = write_preferences(out_dir / "eval.jsonl", preferences_of(split.eval, _rng(seed, n_clients)))
        return cls([write_file_list(f.with_suffix(".list"), [f]) for f in files], held, answers=tuple(split.eval))

    @classmethod
    def read_user(cls, data: str, eval_data: str | None, fed: FederationConfig, n_clients: int,
                  seed: int) -> UserPreferences:
        """The user's preference records (`--data`), read and checked before anything starts."""
        return UserPreferences.read(data, eval_data, fed, n_clients, seed)

    @classmethod
    def write_user(cls, out_dir: Path, users: UserPreferences) -> PreferenceTask:
        """The user's split written as per-client preference JSONL (each behind a `.list`) and the held-out file."""
        from client_agent.data.corpus import write_file_list

        files = [write_preferences(out_dir / f"client-{i}.jsonl", prefs) for i, prefs in enumerate(users.clients)]
        held = write_preferences(out_dir / "eval.jsonl", users.eval)
        return cls([write_file_list(f.with_suffix(".list"), [f]) for f in files], held)

    def _score(self, fed: FederationConfig, flat: np.ndarray | None) -> PreferenceScores:
        from client_agent.paradigms import client_paradigm
        from client_agent.training.flat import load_flat_

        paradigm = client_paradigm(fed.paradigm)
        model = paradigm.prepare(paradigm.build(fed, initialise=True))  # adapters at init: B = 0, the base
        if flat is not None:
            load_flat_(model, torch.as_tensor(flat), paradigm.exchanged)
        scores = score_preferences(model, read_preferences(self.eval_file), tokenizer_of(fed), fed.model.block_size,
                                   fed.paradigm.beta)
        if not self.answers:
            return scores
        from .answers import evaluate_answers

        return replace(scores, f1=evaluate_answers(model, self.answers).f1)

    def score_base(self, fed: FederationConfig) -> PreferenceScores:
        from .base_model import describe

        self.base_line = describe(fed.model)
        return self._score(fed, None)

    def score_global(self, fed: FederationConfig, flat: np.ndarray, client_dirs: list[Path]) -> PreferenceScores:
        return self._score(fed, flat)

    def summary_lines(self, before: PreferenceScores, after: PreferenceScores) -> list[str]:
        """The lines `geofed local --paradigm dpo` ends with (before the run directory)."""
        f1 = [f"F1: {before.f1:.1f} -> {after.f1:.1f}"] if before.f1 is not None and after.f1 is not None else []
        return [*([self.base_line] if self.base_line else []),
                f"reward margin: {before.margin:.3f} -> {after.margin:.3f}",
                f"preference accuracy: {before.accuracy:.1f}% -> {after.accuracy:.1f}%", *f1]
