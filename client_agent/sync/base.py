"""The seam between the client's round loop and the PS: one `SyncPath` per site, picked by `sync.route`.

A path bootstraps Θ0 (the master) or re-seeds it, restores what the site's checkpoint holds, resends an
upload a preemption interrupted, adopts each global model into the local model, and syncs one round
(`sync_round`): diff, encode, checkpoint before send, send, settle the error-feedback residual, and the model
the next round trains on, waited for here or, on the overlapped path, beside the next round. The round loop
has no branch on the path. Every method is called on every rank in the same order; only rank 0 talks to the
PS, inside `Ranks.lead`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import ClassVar

from geofed.config import FederationConfig
from geofed.manifest import Manifest

from ..connection.link_tuner import LinkTuner
from ..connection.model_waits import next_model
from ..connection.ps_client import GlobalVersion, PSClient, Upload
from ..errors import DeferredDeltaError, PushError, StaleDeltaError
from ..paradigms import ClientParadigm
from ..training.checkpoint import ClientCheckpoint
from ..training.ranks import Ranks
from ..training.trainer import LocalTrainer, TrainStats

log = logging.getLogger("geofed.client")


@dataclass(frozen=True)
class PushOutcome:
    """What one sync's push came to, as the agent records it."""

    status: str
    version: int
    staleness: int
    payload_bytes: int
    seconds: float
    codec: str


@dataclass(frozen=True)
class RoundResult:
    """One round's local work, ready to push: the global model it started from (rank 0's; None elsewhere),
    its stats and eval loss (and the paradigm's own held-out metrics, taken with it), and which round of the run
    it is and the optimizer step it ended at."""

    base: GlobalVersion | None
    stats: TrainStats
    eval_loss: float | None
    round: int = 0
    step: int = 0
    eval_metrics: Mapping[str, float] = field(default_factory=dict)  # the paradigm's own, with the eval loss


@dataclass(frozen=True)
class SyncedRound:
    """A pushed round once its outcome is back (rank 0): the round as pushed (its `base` is the model its
    delta was taken against), the outcome, the time the round loop waited for it, and the time it spent
    encoding and sending it."""

    result: RoundResult
    outcome: PushOutcome
    idle_s: float
    push_s: float


@dataclass(frozen=True)
class RoundEnd:
    """What `SyncPath.sync_round` came to: the model the next round is based on (rank 0's; None elsewhere),
    the rounds whose outcome came back during the call (rank 0; to record), and whether the run stops."""

    model: GlobalVersion | None
    synced: tuple[SyncedRound, ...]
    done: bool


@dataclass(frozen=True)
class SyncContext:
    """What a sync path works with: the site's ranks, its PS connection and the federation it joined."""

    ps: PSClient
    ranks: Ranks
    fed: FederationConfig
    paradigm: ClientParadigm
    tuner: LinkTuner
    client_id: str
    work: Path
    manifest: Manifest
    numel: int  # elements of one push (the paradigm's payload)


@dataclass(frozen=True)
class ShardResume:
    """What a sharded checkpoint tells the bootstrap (a re-seed after total PS loss starts at its version)."""

    base_version: int


Resumed = ClientCheckpoint | ShardResume | None


class SyncPath(ABC):
    """How one site's rounds reach the PS (see the module docstring)."""

    # Every rank holds only its own slices of the exchanged vector: a model that needs no initialisation can
    # be built on the meta device and sharded before anything is allocated.
    slices_only: ClassVar[bool] = False

    def __init__(self, ctx: SyncContext, restoring: Future | None = None) -> None:
        """`restoring`: the checkpoint's error-feedback residual, being restored in a thread (`start_restore`)."""
        self.ctx = ctx
        self.saved_upload: tuple[bytes, bytes] | None = None  # an upload a preemption interrupted (rank 0)

    # ---- start: restore, bootstrap, resend ------------------------------------------------------------

    @abstractmethod
    def restore(self, trainer: LocalTrainer, resumed: ClientCheckpoint | None, sharded: bool) -> Resumed:
        """Restore the site's checkpoint into `trainer`; `sharded`: rank 0 found a sharded one. Returns what
        the bootstrap re-seeds from."""
        ...

    @abstractmethod
    def bootstrap(self, model, resumed: Resumed) -> None:
        """Fig. 1 step 2 (the master): stream Θ0 to the PS; after a total PS loss, re-seed from our own
        checkpoint (§III-B4)."""
        ...

    @abstractmethod
    def resend(self) -> None:
        """Relaunched after a preemption mid-push: send that upload again under its own id (every rank)."""
        ...

    # ---- every round ------------------------------------------------------------------------------------

    @abstractmethod
    def adopt(self, model, global_model: GlobalVersion | None) -> None:
        """Apply the global model (rank 0's; None elsewhere) to the local model on every rank."""
        ...

    @abstractmethod
    def push_round(self, trainer: LocalTrainer, result: RoundResult) -> PushOutcome | None:
        """Diff, encode, checkpoint and push one round; the outcome on rank 0, None elsewhere."""
        ...

    def sync_round(self, trainer: LocalTrainer, result: RoundResult, stop: Callable[[], bool]) -> RoundEnd:
        """Push the round, decide on rank 0 whether the run stops (`stop`, told to every rank) and, unless it
        does, wait for the model the push leads to while the other ranks wait with rank 0."""
        outcome = self.push_round(trainer, result)
        ranks, ps, fed = self.ctx.ranks, self.ctx.ps, self.ctx.fed
        done = ranks.bcast_flag(ranks.leader and stop())
        if not ranks.leader:
            if not done:
                ranks.lead(lambda: None)  # while rank 0 waits for the next model
            return RoundEnd(None, (), done)
        t_idle = time.monotonic()
        model = result.base
        if not done:
            model = ranks.lead(partial(next_model, ps, fed, result.base, outcome.status, outcome.version))
        return RoundEnd(model, (SyncedRound(result, outcome, time.monotonic() - t_idle, outcome.seconds),), done)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the path holds. Nothing by default."""

    # ---- shared by the paths --------------------------------------------------------------------------

    def _resume_whole(self, trainer: LocalTrainer, resumed: ClientCheckpoint) -> None:
        """A whole-vector checkpoint's optimizer, data position and interrupted upload."""
        trainer.load_state_dict(resumed.trainer_state())
        if resumed.upload:  # preempted mid-push: that delta is resent, its data is not trained again
            self.saved_upload = tuple(bytes(resumed.upload[k].numpy()) for k in ("header", "payload"))
        log.info(
            "event=resumed client=%s rank=%d step=%d base_version=%d",
            self.ctx.client_id,
            self.ctx.ranks.rank,
            resumed.step,
            resumed.base_version,
        )

    def _prepare(self, result: RoundResult, step: int, header: bytes, frames) -> Upload:
        """Rank 0: spool one round's encoded frames, with the report the PS shows for this client."""
        ps, stats = self.ctx.ps, result.stats
        ps.report = {
            "train_loss": stats.mean_loss,
            "eval_loss": result.eval_loss or 0.0,
            "tokens_per_s": stats.tokens_per_s,
            "bytes_sent": ps.bytes_sent,
            "step": step,
            "paradigm_metrics": dict(result.eval_metrics),
        }
        return ps.prepare(
            base_version=result.base.version,
            codec_header=header,
            frames=frames,
            num_tokens=stats.tokens,
            num_samples=stats.samples,
            local_steps=max(1, stats.steps),
        )

    def _send(self, upload: Upload, base: GlobalVersion, codec: str) -> PushOutcome:
        """Send a prepared upload; a stale one comes back as the STALE outcome, one its site's round share put
        off as DEFERRED (the caller resyncs and retrains either way)."""
        ps = self.ctx.ps
        try:
            r = ps.send(upload)
        except (StaleDeltaError, DeferredDeltaError) as exc:  # retrain on a newer model
            stale = isinstance(exc, StaleDeltaError)
            log.log(logging.WARNING if stale else logging.INFO, "event=delta_%s client=%s detail=%r",
                    "stale" if stale else "deferred", self.ctx.client_id, str(exc))
            latest = ps.latest()
            return PushOutcome("STALE" if stale else "DEFERRED", latest.version if latest else base.version, 0, 0,
                               0.0, codec)
        return PushOutcome(r.status, r.version, r.staleness, r.payload_bytes, r.seconds, codec)

    def _resend_saved(self) -> str:
        """Rank 0: send the saved upload again under its own id; its status (REFUSED: that round is lost)."""
        upload = Upload.restored(*self.saved_upload)
        try:
            status = self.ctx.ps.send(upload).status
        except (StaleDeltaError, DeferredDeltaError, PushError) as exc:  # refused: lost, never counted twice
            status = "REFUSED"
            log.warning("event=upload_refused upload=%s detail=%r", upload.upload_id, str(exc))
        log.info("event=upload_resent upload=%s status=%s", upload.upload_id, status)
        return status
