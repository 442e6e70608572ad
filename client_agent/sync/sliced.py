"""The slice-wise sync path: every rank diffs, error-corrects, encodes and checkpoints its own slice of the
exchanged vector (`SliceSync`); rank 0 relays the frames to the PS. No rank ever holds the whole delta."""

from __future__ import annotations

import json
import logging
from concurrent.futures import Future
from functools import partial

from geofed.codec import make_codec

from ..connection.rejoin_hold import GlobalVersion
from ..connection.upload import Upload
from ..training.checkpoint import ClientCheckpoint
from ..training.privacy import refuse_slice_wise
from ..training.slices.state import SliceSync
from ..training.trainer import LocalTrainer
from .base import PushOutcome, Resumed, RoundResult, ShardResume, SyncContext, SyncPath

log = logging.getLogger("geofed.client")


class SliceWiseSync(SyncPath):
    """One rank's part of a slice-wise sync; every method is collective."""

    slices_only = True

    def __init__(self, ctx: SyncContext, restoring: Future | None = None) -> None:
        super().__init__(ctx)  # a whole-vector residual is not carried into slices: `restoring` is not read
        refuse_slice_wise(ctx.fed.privacy)
        c, ranks = ctx.fed.codec, ctx.ranks
        self.slices = SliceSync(
            ctx.work,
            ranks.rank,
            ranks.world,
            ctx.numel,
            ctx.paradigm.exchanged,
            block=ctx.tuner.block(),
            error_feedback=c.error_feedback,
            decay=c.error_feedback_decay,
        )

    def restore(self, trainer: LocalTrainer, resumed: ClientCheckpoint | None, sharded: bool) -> Resumed:
        ranks = self.ctx.ranks
        if ranks.bcast_flag(sharded):
            meta = self.slices.load(trainer.model, trainer.optimizer)  # every rank its own shards, any rank count
            if resumed is None or resumed.step <= meta["step"]:  # else the whole-vector one is newer: it wins
                trainer.load_progress(meta)
                self.saved_upload = self.slices.saved_upload(meta) if ranks.leader else None
                return ShardResume(meta["base_version"])
        if resumed is not None:
            log.info(
                "event=error_feedback_not_carried client=%s reason=%r",
                self.ctx.client_id,
                "a whole-vector checkpoint resumed slice-wise: the residual starts at zero",
            )
            self._resume_whole(trainer, resumed)
        return resumed

    def bootstrap(self, model, resumed: Resumed) -> None:
        """Θ0 (or a re-seed from the sharded checkpoint, §III-B4) pushed slice by slice, never gathered."""
        ctx, leader = self.ctx, self.ctx.ranks.leader
        base = resumed.base_version if resumed is not None else 0
        if isinstance(resumed, ClientCheckpoint):  # a whole-vector checkpoint (written on one rank): its model
            self.slices.adopt(model, resumed.model.numpy() if leader else None)
        values = self.slices.current(model)

        def spool(header: bytes, frames) -> Upload:
            ctx.ps.start()
            return ctx.ps.prepare(
                base_version=base, codec_header=header, frames=frames, init=True, manifest=ctx.paradigm.manifest(model)
            )

        upload = self.slices.encode(make_codec("fp32"), values, spool if leader else None, delta=False)

        def send() -> None:
            receipt = ctx.ps.send(upload)
            log.info(
                "event=bootstrapped client=%s version=%d reseed=%s slice_wise=True",
                ctx.client_id,
                receipt.version,
                base > 0,
            )

        ctx.ranks.lead(send)

    def resend(self) -> None:
        ranks = self.ctx.ranks
        if ranks.bcast_flag(self.saved_upload is not None):
            status = ranks.lead(self._resend_saved)
            self.slices.settle(ranks.bcast_text(status))
        self.saved_upload = None

    def adopt(self, model, global_model: GlobalVersion | None) -> None:
        self.slices.adopt(model, global_model.flat if global_model else None)

    def push_round(self, trainer: LocalTrainer, result: RoundResult) -> PushOutcome | None:
        """Every rank diffs, encodes and relays its slice and checkpoints its shards; rank 0 then pushes (in
        `Ranks.lead`) and every rank settles its residual by the outcome."""
        ctx, ranks, leader = self.ctx, self.ctx.ranks, self.ctx.ranks.leader
        values = self.slices.delta(trainer.model)
        name = ranks.bcast_text(ctx.tuner.codec_name() if leader else None)
        version = ranks.bcast_text(str(result.base.version) if leader else None)
        # A sharded PS's bounds, as rank 0 last learnt them (Join, or a model transfer after a STALE push).
        cuts = ranks.bcast_text(json.dumps(list(ctx.ps.shard_cuts)) if leader else None)
        self.slices.cuts = tuple(json.loads(cuts))
        spool = partial(self._prepare, result, trainer.step) if leader else None
        upload = self.slices.encode(ctx.tuner.codec(name), values, spool)
        del values
        meta = {
            "step": trainer.step,
            "data_position": trainer.stream.state_dict(),
            "scaler": trainer.scaler.state_dict(),
            "base_version": int(version),
            "eval_loss": result.eval_loss,
            "paradigm": ctx.paradigm.name,
            "manifest": [[t.name, list(t.shape), t.dtype] for t in ctx.manifest],
        }
        self.slices.save(trainer.step, trainer.model, trainer.optimizer, meta, upload)  # before the push
        outcome = ranks.lead(partial(self._send, upload, result.base, name))
        self.slices.settle(ranks.bcast_text(outcome.status if outcome is not None else None))
        return outcome
