"""The overlapped sync path: the client keeps training while its delta uploads and the next model downloads.

Round k ends at b + δ_k (b: the global model it is based on). The round is encoded and checkpointed as on
the whole-vector path, then sent, and the next global model G' awaited, in a thread, while the next round
trains on from the eager estimate θ_k = b + w·δ_k of G': the client's own delta applied at once, at the
outer learning rate (w = aggregation.global_lr, the PS's outer step with this delta standing in for the
round's average, as in DiLoCo's eager updates) or whole (w = 1, `training.overlap_eager: full`). When G'
arrives it is folded in with the correction that makes the eager estimate exact,

    θ ← θ + (G' − θ_k),

which keeps the local progress made since the push (θ − θ_k) and replaces the estimate θ_k by what
the PS really holds (δ_k at its outer step and staleness weight, plus the other clients' deltas). If the
PS did not take δ_k (STALE), G' lacks it and the same fold drops it, as the whole-vector path drops a
stale round. The next delta is then θ − G': nothing is pushed twice and nothing trained is left out.

At most one push is in flight: a round that ends before the previous push and its model are back waits
for them (the only time the client idles). The fold happens at round boundaries, so the progress of the
round that overlapped the transfer was computed on the model one transfer older than the global
(one-step-delayed application); the PS's staleness weighting sees the version folded before the push.

A preemption mid-overlap loses nothing: the checkpoint written before the push holds that upload, the
optimizer and the data position at the push; the relaunched client resends the upload (DUPLICATE if it had
landed) and trains the batches after that data position again, on the global model. The error-feedback
residual moves on when the PS's answer arrives, exactly as on the whole-vector path.

One rank only, and only paradigms that exchange parameters element by element (the fold is an
elementwise sum); `sync_route` sends every other site down the whole-vector path, with its reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

import torch

from ..connection.model_waits import next_model
from ..connection.ps_client import GlobalVersion
from ..training.trainer import LocalTrainer
from .base import PushOutcome, RoundEnd, RoundResult, SyncContext, SyncedRound
from .whole import WholeVectorSync

log = logging.getLogger("geofed.client")

CLOSE_JOIN_S = 5.0  # how long `close` waits for the last push's thread to return


@dataclass(frozen=True)
class Settled:
    """An overlapped push once it has come back: its outcome, the model it led to (None for the last
    push, whose model is not awaited), and how long the round loop waited for it."""

    outcome: PushOutcome
    model: GlobalVersion | None
    waited_s: float


class OverlappedRounds:
    """A round loop's sync in the overlapped order, on a path whose `push_round` starts the send and whose
    `settle(await_model)` returns it (`Settled`, or None when nothing is in flight): the push in flight is
    settled and its model folded in (`adopt`) before the round that trained beside it is pushed, and the
    run's last push is settled without awaiting its model."""

    _in_flight: tuple[RoundResult, float] | None = None  # the round whose push is in flight, and its push time

    def sync_round(self, trainer: LocalTrainer, result: RoundResult, stop: Callable[[], bool]) -> RoundEnd:
        """Settle the push in flight, fold its model in and push this round on it; the next round trains on
        from there. Idle time is the wait for the push in flight; push time the encode and checkpoint
        before the send started (the send itself overlaps training)."""
        synced, model = self._settle_in_flight(trainer, await_model=True)
        result = replace(result, base=model or result.base)
        t_push = time.monotonic()
        self.push_round(trainer, result)
        self._in_flight = (result, time.monotonic() - t_push)
        if not stop():
            return RoundEnd(result.base, synced, False)
        last, _ = self._settle_in_flight(trainer, await_model=False)
        return RoundEnd(result.base, synced + last, True)

    def _settle_in_flight(
        self, trainer: LocalTrainer, await_model: bool
    ) -> tuple[tuple[SyncedRound, ...], GlobalVersion | None]:
        """The push in flight once it is back, as a synced round, and the model it led to, folded into the
        trainer's model (None when it was not awaited or nothing was in flight)."""
        settled = self.settle(await_model)
        if settled is None or self._in_flight is None:
            return (), None
        (pushed, push_s), self._in_flight = self._in_flight, None
        if settled.model is not None:
            self.adopt(trainer.model, settled.model)
        return (SyncedRound(pushed, settled.outcome, settled.waited_s, push_s),), settled.model


class OverlapSync(OverlappedRounds, WholeVectorSync):
    """The whole-vector path with the send and the wait for the next model moved beside the next round."""

    def __init__(self, ctx: SyncContext, restoring: Future | None = None) -> None:
        super().__init__(ctx, restoring)
        if ctx.ranks.distributed:
            raise ValueError("the overlapped sync path runs on one rank; sync_route routes other sites elsewhere")
        self.base: GlobalVersion | None = None  # the global model the local model is based on
        self.pushed: torch.Tensor | None = None  # θ_k: the exchanged vector at the push in flight
        self._sent: Future | None = None  # PushOutcome of the push in flight
        self._next: Future | None = None  # the GlobalVersion it leads to
        self.fold_due = False  # a settled push's model is to be folded in by the next `adopt`
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # orders the thread's "send done" against `settle`'s "last push"
        self._last = False  # the push in flight is the run's last: its thread waits for no model

    # ---- every round ------------------------------------------------------------------------------------

    def adopt(self, model, global_model: GlobalVersion | None) -> None:
        """Base the local model on `global_model`. The model a settled push led to is folded in, keeping the
        progress since that push; any other new model (the first one, or the first after a relaunch) is
        loaded as it is; the model already based on changes nothing."""
        if global_model is None:
            return
        if self.fold_due:
            fold = self.ctx.paradigm.delta(self.ctx.ranks, torch.empty_like(self.pushed), model, self.pushed.numpy())
            fold += torch.from_numpy(global_model.flat)  # θ − θ_k + G'
            self.ctx.paradigm.adopt(self.ctx.ranks, model, fold.numpy())
            log.info(
                "event=overlap_folded client=%s version=%d based_on=%d",
                self.ctx.client_id,
                global_model.version,
                self.base.version,
            )
        elif global_model is self.base:
            return
        elif self.pushed is not None:
            raise RuntimeError("a push is in flight: settle it before basing the model on another version")
        else:
            super().adopt(model, global_model)
        self.base, self.pushed, self.fold_due = global_model, None, False

    def settle(self, await_model: bool = True) -> Settled | None:
        """Wait for the push in flight and, unless `await_model` is false, the model it leads to; None when
        nothing is in flight. The caller folds the model in (`adopt`) before the next push."""
        if self._sent is None:
            return None
        t0 = time.monotonic()
        if not await_model:
            with self._lock:
                self._last = True
        outcome = self._sent.result()
        model = self._next.result() if await_model else None
        self._sent = self._next = None
        self.fold_due = model is not None
        return Settled(outcome, model, time.monotonic() - t0)

    def push_round(self, trainer: LocalTrainer, result: RoundResult) -> PushOutcome | None:
        """Diff against the folded global model, encode, checkpoint, and start the send; returns None (the
        outcome comes from `settle`)."""
        if self._sent is not None:
            raise RuntimeError("a push is still in flight: settle it and fold its model in first")
        if result.base is not self.base or self.fold_due:
            raise RuntimeError("a round is pushed on the model it is based on (adopt it first)")
        ctx = self.ctx
        ctx.paradigm.delta(ctx.ranks, self.delta, trainer.model, result.base.flat)
        weight = self.eager_weight()
        # θ_k, the eager estimate of the next global model, before the residual joins δ.
        pushed = torch.from_numpy(result.base.flat) + (self.delta if weight == 1.0 else weight * self.delta)
        state = trainer.state_dict()
        state["private"] = ctx.paradigm.private_state(trainer.model)
        upload, codec = self.encode_and_checkpoint(result, state, trainer.step)
        if weight != 1.0:  # after the checkpoint: it keeps the model as trained (base + δ)
            ctx.paradigm.adopt(ctx.ranks, trainer.model, pushed.numpy())
        self.pushed = pushed
        self._sent, self._next = Future(), Future()
        self._thread = threading.Thread(
            target=self._send_and_wait, args=(upload, result.base, codec), name="geofed-overlap", daemon=True
        )
        self._thread.start()
        return None

    def eager_weight(self) -> float:
        """How much of its own delta the client applies at once (`training.overlap_eager`): the outer
        learning rate (at most 1), or all of it."""
        fed = self.ctx.fed
        return 1.0 if fed.training.overlap_eager == "full" else min(1.0, fed.aggregation.outer_lr)

    def close(self) -> None:
        """Wait briefly for the thread of the last push, which waits for no model once `settle` said so; a
        push still in flight at the end (an error unwinding the loop) is left to its daemon thread (its
        checkpoint resends it)."""
        if self._thread is not None and self._last:
            self._thread.join(timeout=CLOSE_JOIN_S)
        self._sent = self._next = None

    # ---- the thread ---------------------------------------------------------------------------------------

    def _send_and_wait(self, upload, base: GlobalVersion, codec: str) -> None:
        sent, nxt = self._sent, self._next
        try:
            outcome = self.settle_send(upload, base, codec)
        except BaseException as exc:  # handed to the round loop, which raises it
            sent.set_exception(exc)
            nxt.set_exception(exc)
            return
        with self._lock:
            last = self._last
            sent.set_result(outcome)
        if last:  # the run ends with this push: no thread is left waiting on the PS as the process exits
            nxt.set_result(None)
            return
        try:
            nxt.set_result(next_model(self.ctx.ps, self.ctx.fed, base, outcome.status, outcome.version))
        except BaseException as exc:
            nxt.set_exception(exc)
