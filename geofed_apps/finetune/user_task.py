"""`geofed local --paradigm NAME --data DIR`: fine-tune on the user's own prompt/completion pairs, scored on theirs.

The user's files are read and checked whole before anything starts (`UserSplit.read`: any schema
`client_agent.data.records` reads; text records are refused, a score needs completions). The held-out pairs
are the user's choice: the files of `--eval-data`, else a seeded `training.eval_fraction` of the pairs
(the seed is `--seed`). The training pairs are shuffled with the same seed and dealt round-robin to the
clients, each written as its own JSONL. Examples longer than `model.block_size` lose the start of their
prompt (as every client cuts them); they are counted up front, and data with a completion that cannot fit
at all is refused. The score is the docstring task's: exact match, F1 and answer loss of greedy
completions on the held-out pairs, of the base model before and of the published global model after; a
closed-set task (2 to `MAX_CLASSES` distinct completions, such as labels) also gets the accuracy of picking the
likeliest completion.
Greedy decoding stops at the first newline, so a completion is scored on its first line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import nn

from client_agent.data.files import BIN_SUFFIXES, DataError, Fit, collect_files, file_records, tokenize_files
from client_agent.data.tokenizer import Tokenizer
from geofed.config import FederationConfig

from .answers import AnswerScores
from .interval import interval_line, wilson_interval

MAX_CLASSES = 64  # at most this many distinct completions make a closed-set (classification) task


def tokenizer_of(fed: FederationConfig) -> Tokenizer:
    """The federation's tokenizer (`model.tokenizer`): the byte tokenizer, or a local Hugging Face directory."""
    from client_agent.data.tokenizer import load_tokenizer

    return load_tokenizer(fed.model.tokenizer)


@dataclass(frozen=True)
class UserPair:
    """One of the user's examples; `answer` is what greedy decoding should produce (the completion's first line)."""

    prompt: str
    completion: str

    @property
    def answer(self) -> str:
        return self.completion.strip().split("\n", 1)[0]


def read_user_pairs(files: Sequence[Path], tokenizer: Tokenizer) -> list[UserPair]:
    """Every record of `files` as a pair; a text record is a DataError (a score needs completions)."""
    out = []
    for path in files:
        if Path(path).suffix.lower() in BIN_SUFFIXES:
            raise DataError(f"{path} holds tokens; --paradigm with --data trains and scores prompt/completion pairs")
        for record, line in file_records(Path(path), tokenizer):
            if isinstance(record, str):
                where = f"{path}:{line}" if Path(path).suffix.lower() == ".jsonl" else str(path)
                raise DataError(f"{where} is text; --paradigm with --data trains and scores prompt/completion pairs")
            out.append(UserPair(*record))
    return out


@dataclass(frozen=True)
class UserSplit:
    """The user's pairs dealt to the clients, the held-out pairs, how they were chosen and how they fit."""

    clients: tuple[tuple[UserPair, ...], ...]
    eval: tuple[UserPair, ...]
    held_out: str  # which pairs were held out, for the summary
    fit: Fit
    block_size: int

    @classmethod
    def read(cls, data: str | Path, eval_data: str | Path | None, n_clients: int, seed: int, eval_fraction: float,
             tokenizer: Tokenizer, block_size: int) -> UserSplit:
        """Read and check the user's files (DataError on anything unusable) and split them."""
        files = collect_files(data)
        eval_files = collect_files(eval_data) if eval_data is not None else []
        pairs, held = read_user_pairs(files, tokenizer), read_user_pairs(eval_files, tokenizer)
        fit = Fit(0, 0, 0)
        for group in (files, eval_files):
            if group:
                fit = fit + Fit.of(tokenize_files(group, tokenizer)[0], block_size)  # pairs only: `Examples`
        if fit.unfit:
            raise DataError(fit.refusal(block_size))
        order = np.random.default_rng(seed).permutation(len(pairs))
        if eval_files:
            train = [pairs[i] for i in order]
            held_out = f"{len(held)} pairs from {eval_data} ({len(eval_files)} files, --eval-data)"
        else:
            n_eval = max(1, round(eval_fraction * len(pairs)))
            held = [pairs[i] for i in sorted(order[:n_eval])]
            train = [pairs[i] for i in order[n_eval:]]
            held_out = (f"{n_eval} of {len(pairs)} pairs of {data} (training.eval_fraction {eval_fraction:g},"
                        f" seed {seed})")
        if len(train) < n_clients:
            raise DataError(f"{len(train)} training pairs in {data} are too few for {n_clients} clients")
        clients = tuple(tuple(train[i::n_clients]) for i in range(n_clients))
        return cls(clients, tuple(held), held_out, fit, block_size)

    def candidates(self) -> tuple[str, ...] | None:
        """The training completions when the task is a closed set (2 to `MAX_CLASSES` distinct completions, every
        held-out one among them): a classification task, also scored by which completion the model finds likeliest."""
        seen = sorted({p.completion for pairs in self.clients for p in pairs})
        if 2 <= len(seen) <= MAX_CLASSES and {p.completion for p in self.eval} <= set(seen):
            return tuple(seen)
        return None

    def lines(self) -> list[str]:
        """What the run trains and scores on: the held-out pairs and the examples cut to fit."""
        out = [f"held out: {self.held_out}; {sum(map(len, self.clients))} pairs trained on by"
               f" {len(self.clients)} clients"]
        if self.fit.cut:
            out.append(f"cut to fit: {self.fit.cut} of {self.fit.total} pairs exceed model.block_size"
                       f" {self.block_size} tokens and lose the start of their prompt")
        return out


def _write(path: Path, pairs: Sequence[UserPair]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps({"prompt": p.prompt, "completion": p.completion}) + "\n")
    return path


@dataclass
class UserTask:
    """The user's split written as per-client JSONL (each behind a `.list`, as a client's --data) and its scoring."""

    client_files: list[Path]
    eval_file: Path
    split: UserSplit
    fed: FederationConfig  # its tokenizer encodes the prompts and decodes the answers, as the clients'

    @classmethod
    def write(cls, out_dir: Path, split: UserSplit, fed: FederationConfig) -> UserTask:
        from client_agent.data.corpus import write_file_list

        files = [_write(out_dir / f"client-{i}.jsonl", pairs) for i, pairs in enumerate(split.clients)]
        lists = [write_file_list(f.with_suffix(".list"), [f]) for f in files]
        return cls(lists, _write(out_dir / "eval.jsonl", split.eval), split, fed)

    def score(self, model_of_client: Callable[[int], nn.Module], *, one_model: bool) -> AnswerScores:
        """The held-out scores of client i's model, averaged over the clients (once when all are the same)."""
        from .answers import evaluate_answers, mean_scores

        n = 1 if one_model else len(self.client_files)
        tokenizer, candidates = tokenizer_of(self.fed), self.split.candidates()
        return mean_scores([evaluate_answers(model_of_client(i), self.split.eval, tokenizer=tokenizer,
                                             candidates=candidates) for i in range(n)])

    def score_base(self, fed: FederationConfig) -> AnswerScores:
        from client_agent.training.model import build_model

        model = build_model(fed.model)
        return self.score(lambda _: model, one_model=True)

    def score_global(self, fed: FederationConfig, flat: np.ndarray, client_dirs: list[Path]) -> AnswerScores:
        from .preset import global_models

        model_of_client, one_model = global_models(fed, flat, client_dirs)
        return self.score(model_of_client, one_model=one_model)

    def summary_lines(self, before: AnswerScores, after: AnswerScores) -> list[str]:
        """The lines `geofed local --paradigm --data` ends with (before the run directory)."""
        return [
            f"exact match: {before.exact_match:.1f} -> {after.exact_match:.1f}",
            f"F1: {before.f1:.1f} -> {after.f1:.1f}",
            f"eval loss: {before.eval_loss:.2f} -> {after.eval_loss:.2f}",
            interval_line(after.predictions, [p.answer for p in self.split.eval]),
            *self._closed_set_lines(before, after),
            *self.split.lines(),
        ]

    def _closed_set_lines(self, before: AnswerScores, after: AnswerScores) -> list[str]:
        """The closed-set accuracy of a classification task: how often the held-out pair's own completion is the
        likeliest of the training completions."""
        candidates = self.split.candidates()
        if candidates is None or before.closed_set is None or after.closed_set is None:
            return []
        n = len(self.split.eval)
        low, high = wilson_interval(round(after.closed_set * n / 100), n)
        return [f"closed-set accuracy: {before.closed_set:.1f} -> {after.closed_set:.1f}",
                f"closed set: the likeliest of the {len(candidates)} completions seen in training, by the summed"
                f" log-probability of their tokens; 95% interval {low:.1f}-{high:.1f} (Wilson, {n} pairs)"]
