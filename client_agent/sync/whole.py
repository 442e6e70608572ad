"""The whole-vector sync path: rank 0 gathers the exchanged vector, diffs, encodes and checkpoints it.

Every paradigm can take it; on a site of several ranks it costs rank 0 several model-sized buffers (the
slice-wise path, `sync.sliced`, keeps each rank at its own slice where the paradigm and codec allow).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import warnings
from concurrent.futures import Future
from functools import partial

import torch

from geofed.codec import CodecError, ErrorFeedback, make_codec

from ..connection.rejoin_hold import GlobalVersion
from ..connection.upload import Upload, settle_residual
from ..threads import in_thread
from ..training.checkpoint import CheckpointManager, ClientCheckpoint
from ..training.privacy import local_noise
from ..training.trainer import LocalTrainer
from .base import PushOutcome, Resumed, RoundResult, SyncContext, SyncPath

log = logging.getLogger("geofed.client")


class WholeVectorSync(SyncPath):
    """Rank 0 holds the global model, δ and the residual whole; the other ranks take part in the gathers."""

    def __init__(self, ctx: SyncContext, restoring: Future | None = None) -> None:
        super().__init__(ctx, restoring)
        c, leader = ctx.fed.codec, ctx.ranks.leader
        self.ef = ErrorFeedback(ctx.numel, c.error_feedback_decay) if c.error_feedback and leader else None
        self.restoring = restoring  # the checkpoint's residual, being restored in a thread (`start_restore`)
        self.delta = torch.empty(ctx.numel, dtype=torch.float32) if leader else None
        self.ckpts = CheckpointManager(ctx.work / "checkpoints", keep_best=ctx.fed.training.keep_best)

    def restore(self, trainer: LocalTrainer, resumed: ClientCheckpoint | None, sharded: bool) -> Resumed:
        if resumed is None:
            return None
        self._resume_whole(trainer, resumed)
        if self.ef is not None and self.restoring is not None:
            self.ef = restored_residual(self.restoring, self.ctx.numel)
        return resumed

    def bootstrap(self, model, resumed: Resumed) -> None:
        ctx, paradigm = self.ctx, self.ctx.paradigm
        base = 0
        if isinstance(resumed, ClientCheckpoint) and resumed.model.numel():
            paradigm.adopt(ctx.ranks, model, resumed.model if ctx.ranks.leader else None)
            base = resumed.base_version
        flat = paradigm.full_exchanged(ctx.ranks, model)

        def push() -> None:
            ctx.ps.start()
            header, frames = make_codec("fp32").encode(flat.numpy())
            receipt = ctx.ps.push(
                base_version=base, codec_header=header, frames=frames, init=True, manifest=paradigm.manifest(model)
            )
            log.info("event=bootstrapped client=%s version=%d reseed=%s", ctx.client_id, receipt.version, base > 0)

        ctx.ranks.lead(push)

    def resend(self) -> None:
        def send() -> None:
            settle_residual(self.ef, self._resend_saved())

        if self.ctx.ranks.bcast_flag(self.saved_upload is not None):
            self.ctx.ranks.lead(send)
        self.saved_upload = None

    def adopt(self, model, global_model: GlobalVersion | None) -> None:
        self.ctx.paradigm.adopt(self.ctx.ranks, model, global_model.flat if global_model else None)

    def push_round(self, trainer: LocalTrainer, result: RoundResult) -> PushOutcome | None:
        ctx = self.ctx
        ctx.paradigm.delta(ctx.ranks, self.delta, trainer.model, result.base.flat if ctx.ranks.leader else None)
        state = trainer.state_dict()  # collective under FSDP: gathers optimizer state to rank 0
        state["private"] = ctx.paradigm.private_state(trainer.model)
        # Rank 0 checkpoints and pushes while the other ranks wait in short polls (`Ranks.lead`).
        return ctx.ranks.lead(partial(self.push, result, state, trainer.step))

    def push(self, result: RoundResult, state: dict, step: int) -> PushOutcome:
        """Rank 0: encode δ (with error feedback), checkpoint the round with its upload, then send it.

        A client preempted mid-push resends that upload when relaunched (DUPLICATE if it had landed) instead
        of training again. The error-feedback residual moves on only when the PS took the delta.
        """
        upload, codec = self.encode_and_checkpoint(result, state, step)
        return self.settle_send(upload, result.base, codec)

    def encode_and_checkpoint(self, result: RoundResult, state: dict, step: int) -> tuple[Upload, str]:
        """Rank 0: encode δ (in `self.delta`, with error feedback) and checkpoint the round with its upload;
        the upload and the codec's name, ready for `settle_send`."""
        ps, tuner = self.ctx.ps, self.ctx.tuner
        model_flat = self.ctx.paradigm.checkpoint_flat(self.delta, result.base.flat)  # before the residual joins δ
        values = local_noise(self.ctx.fed.privacy, self.delta.numpy())  # local DP: clipped, noised
        codec = tuner.codec(tuner.codec_name(values))
        cut = {"cuts": ps.shard_cuts} if ps.shard_cuts else {}  # a sharded PS: frames end at its shard bounds
        header, frames = self.ef.encode(codec, values, **cut) if self.ef is not None else codec.encode(values, **cut)
        upload = self._prepare(result, step, header, frames)
        self._checkpoint(state, model_flat, result, step, upload)
        return upload, codec.name

    def settle_send(self, upload: Upload, base: GlobalVersion, codec: str) -> PushOutcome:
        """Rank 0: send a checkpointed upload; the error-feedback residual moves on by its outcome
        (`settle_residual`)."""
        outcome = self._send(upload, base, codec)
        settle_residual(self.ef, outcome.status)
        return outcome

    def _checkpoint(
        self, state: dict, model_flat: torch.Tensor, result: RoundResult, step: int, upload: Upload
    ) -> None:
        """One atomic file every sync, written just before its push, plus the K lowest-eval-loss ones (§III-B4)."""
        base, paradigm = result.base, self.ctx.paradigm
        header, payload = upload.saved()
        ckpt = ClientCheckpoint(
            model=model_flat,
            optimizer=state["optimizer"],
            step=state["step"],
            data_position=state["data_position"],
            base_version=base.version,
            residual=self.ef.state_dict() if self.ef is not None else {},
            scaler=state.get("scaler", {}),
            eval_loss=result.eval_loss,
            private=state.get("private", {}),
            paradigm=paradigm.name,
            manifest=[[t.name, list(t.shape), t.dtype] for t in self.ctx.manifest],
            upload={"header": _bytes_tensor(header), "payload": _bytes_tensor(payload)},
            base_model=_read_only_tensor(base.flat),
            base_instance=base.instance,
        )
        self.ckpts.save_latest(ckpt)
        if result.eval_loss is not None:
            self.ckpts.consider(result.eval_loss, step, dataclasses.replace(ckpt, upload={}, base_model=None))


def start_restore(resumed: ClientCheckpoint | None, fed, client_id: str, leader: bool) -> Future | None:
    """Restore the checkpoint's error-feedback residual (two model-sized vectors read from the mmap, checked,
    copied, hashed) in a thread, beside the model code import and the first transfer; None if there is none."""
    if not (isinstance(resumed, ClientCheckpoint) and resumed.residual and fed.codec.error_feedback and leader):
        return None
    return in_thread(partial(restore_residual, resumed.residual, fed.codec.error_feedback_decay, client_id))


def restore_residual(residual: dict[str, torch.Tensor], decay: float, client_id: str) -> ErrorFeedback:
    """The checkpoint's error feedback, sized by its own residual (`restored_residual` checks it fits the model)."""
    ef = ErrorFeedback(residual["residual"].numel() if "residual" in residual else 0, decay)
    ef.load_state_dict(residual)
    log.info(
        "event=error_feedback_restored client=%s residual_sha256=%s staged=%s",
        client_id,
        hashlib.sha256(ef.residual.tobytes()).hexdigest(),
        ef.staged is not None,
    )
    return ef


def restored_residual(restoring: Future, numel: int) -> ErrorFeedback:
    """The residual restored in `restoring` (its error raised here), refused unless it has the model's size."""
    ef = restoring.result()
    if ef.numel != numel:
        raise CodecError(f"residual must be float32 of shape ({numel},), got float32 ({ef.numel},)")
    return ef


def _read_only_tensor(flat) -> torch.Tensor:
    """A tensor over a published (read-only) model vector, without a copy; only ever read (by torch.save)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(flat)


def _bytes_tensor(data: bytes) -> torch.Tensor:
    """`data` as a uint8 tensor (what a weights-only checkpoint can hold)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
