"""Greedy-decoded answers on the held-out pairs: exact match, token F1 and answer loss of one model.

Decoding is greedy (argmax) and stops at a newline, EOS, or `MAX_NEW` tokens (bytes, unless the caller gives
the tokenizer the model was trained with). The eval loss is the mean
cross-entropy of the completion's tokens given the prompt, so it measures the task, not how well the model
predicts docstrings. A prompt longer than the model's context loses its start, as in training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from client_agent.data.tokenizer import Tokenizer

from .metrics import score

MAX_NEW = 40
STOP = frozenset(b"\n")


class Pair(Protocol):
    """A held-out example: the prompt the model sees, the completion it is trained on, the answer scored."""

    @property
    def prompt(self) -> str: ...

    @property
    def completion(self) -> str: ...

    @property
    def answer(self) -> str: ...


@dataclass(frozen=True)
class AnswerScores:
    exact_match: float  # percent
    f1: float  # percent
    eval_loss: float  # nats per answer token
    predictions: tuple[str, ...]
    closed_set: float | None = None  # percent whose likeliest candidate completion is theirs (closed-set tasks)


def _encode(text: str, tokenizer: Tokenizer | None) -> list[int]:
    """Ids of `text`: the tokenizer's (as training encodes prompt and completion apart), else its bytes."""
    return [int(i) for i in tokenizer.encode(text)] if tokenizer is not None else list(text.encode("utf-8"))


def _context(model: nn.Module) -> int:
    """The model's context in tokens."""
    return getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 128)


@torch.no_grad()
def greedy_answer(model: nn.Module, prompt: str, eos_id: int, max_new: int = MAX_NEW,
                  tokenizer: Tokenizer | None = None) -> str:
    """Greedy continuation of `prompt` up to a stop byte or, with `tokenizer`, a token decoding to a newline
    (neither included); without one the ids are bytes."""
    ids = _encode(prompt, tokenizer)
    context = _context(model)
    out: list[int] = []
    for _ in range(max_new):
        window = (ids + out)[-context:]
        logits = model(input_ids=torch.tensor([window]), use_cache=False).logits[0, -1]
        nxt = int(logits.argmax())
        if nxt == eos_id or (tokenizer is None and (nxt in STOP or nxt > 255)):
            break
        out.append(nxt)
        if tokenizer is not None and "\n" in tokenizer.decode(out):
            return tokenizer.decode(out).split("\n", 1)[0]
    return tokenizer.decode(out) if tokenizer is not None else bytes(out).decode("utf-8", errors="replace")


@torch.no_grad()
def answer_loss(model: nn.Module, pairs: Sequence[Pair], tokenizer: Tokenizer | None = None) -> float:
    """Mean cross-entropy of the completion tokens (the answer and its newline) given each prompt."""
    total, count = 0.0, 0
    context = _context(model)
    for p in pairs:
        prompt, answer = _encode(p.prompt, tokenizer), _encode(p.completion, tokenizer)
        ids = torch.tensor([(prompt + answer)[-(context + 1):]])
        logits = model(input_ids=ids[:, :-1], use_cache=False).logits[0]
        targets = ids[0, 1:]
        n = min(len(answer), context)
        total += float(F.cross_entropy(logits[-n:].float(), targets[-n:], reduction="sum"))
        count += n
    return total / count


@torch.no_grad()
def closed_set_accuracy(model: nn.Module, pairs: Sequence[Pair], candidates: Sequence[str],
                        tokenizer: Tokenizer | None = None) -> float:
    """Percent of `pairs` whose own completion is the likeliest of `candidates` (each a whole completion, scored
    by the summed log-probability of its tokens given the prompt): how a classifier built on the model answers,
    whatever greedy decoding produces."""
    context = _context(model)
    endings = [_encode(c, tokenizer) for c in candidates]
    width = max(map(len, endings))
    right = 0
    for p in pairs:
        prompt = _encode(p.prompt, tokenizer)[-(context + 1 - width):]
        rows = [prompt + e + [0] * (width - len(e)) for e in endings]
        ids = torch.tensor(rows)
        logp = F.log_softmax(model(input_ids=ids[:, :-1], use_cache=False).logits.float(), dim=-1)
        picked = logp.gather(-1, ids[:, 1:, None])[..., 0]
        start = len(prompt) - 1
        scores = [float(picked[i, start:start + len(e)].sum()) for i, e in enumerate(endings)]
        right += candidates[max(range(len(scores)), key=scores.__getitem__)] == p.completion
    return 100.0 * right / len(pairs)


def evaluate_answers(model: nn.Module, pairs: Sequence[Pair], eos_id: int = 256,
                     tokenizer: Tokenizer | None = None, candidates: Sequence[str] | None = None) -> AnswerScores:
    """Exact match and F1 (percent) of greedy answers, and the answer loss, on `pairs`; with `candidates` (the
    completions of a closed-set task) also the closed-set accuracy. Ids are bytes (EOS `eos_id`) unless a
    `tokenizer` is given (its EOS, then)."""
    torch.set_num_threads(1)  # one token at a time: more threads only spin against the training processes
    eos_id = tokenizer.eos_id if tokenizer is not None else eos_id
    was_training = model.training
    model.eval()
    try:
        preds = tuple(greedy_answer(model, p.prompt, eos_id, tokenizer=tokenizer) for p in pairs)
        loss = answer_loss(model, pairs, tokenizer)
        closed = closed_set_accuracy(model, pairs, candidates, tokenizer) if candidates else None
    finally:
        model.train(was_training)
    em, f1 = score(preds, [p.answer for p in pairs])
    return AnswerScores(em, f1, loss, preds, closed)


def mean_scores(scores: Sequence[AnswerScores]) -> AnswerScores:
    """The mean of several models' scores on the same pairs (Hybrid LoRA: one per client)."""
    n = len(scores)
    closed = None if scores[0].closed_set is None else sum(s.closed_set or 0.0 for s in scores) / n
    return AnswerScores(sum(s.exact_match for s in scores) / n, sum(s.f1 for s in scores) / n,
                        sum(s.eval_loss for s in scores) / n, scores[0].predictions, closed)
