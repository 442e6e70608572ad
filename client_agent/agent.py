"""The client agent's sync loop (Algorithm 1, client side; paper Fig. 1 steps 1-6).

Join with a one-time token; the master bootstraps Θ0; then repeat: adopt the newest global model,
train H steps or T seconds, push δ = θ_local − θ_base compressed, checkpoint. A relaunched client
resumes its optimizer state and data position from its own checkpoint and the model from the PS.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from geofed.codec import CodecError, ErrorFeedback, make_codec
from geofed.config import ClientConfig, FederationConfig
from geofed.manifest import TensorEntry
from geofed.tuning import initial_mode

from . import grid_apply
from .checkpoint import CheckpointManager, ClientCheckpoint
from .corpus import read_file_list
from .data import TokenStream, load_tokens
from .flat import ManifestMismatch, check_manifest
from .fsdp import build_on_meta, shard_model
from .link_tuner import LinkTuner
from .paradigms import ClientParadigm, client_paradigm
from .precision import pick_precision
from .ps_client import GlobalVersion, JoinError, JoinSpec, PSClient, PushError, StaleDeltaError, Upload
from .ranks import Ranks
from .shard_route import Route, shard_route
from .shard_sync import ShardSync, sharded_meta
from .tokenizer import check_vocab, load_tokenizer
from .trainer import LocalTrainer, NonFiniteLossError

log = logging.getLogger("geofed.client")

PREEMPTED_EXIT = 143  # 128 + SIGTERM: the agent stopped on a preemption signal
PREEMPTED_CLOSE_S = 5.0  # how long a preempted agent waits for its PS connection to close

FEDERATION_CACHE = "federation.json"  # the federation of the last Join: checked before the next one
MAX_NON_FINITE_ROUNDS = 3  # rounds in a row with no finite step before the client gives up
TAKEN = ("ACCEPTED", "APPLIED", "DUPLICATE")  # push outcomes in which the PS has the delta


def private_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over a private state's names and bytes (logged on restore, so a rejoin can be checked)."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class Preempted(Exception):
    """SIGTERM arrived: stop at once; the last sync's checkpoint is the resume point."""


@dataclass(frozen=True)
class PushOutcome:
    """What one sync's push came to, as the agent records it."""

    status: str
    version: int
    staleness: int
    payload_bytes: int
    seconds: float
    codec: str


@dataclass
class RoundRecord:
    """One line of metrics.jsonl."""

    t: float
    client: str
    round: int
    step: int
    base_version: int
    version: int
    status: str
    staleness: int
    train_loss: float
    eval_loss: float | None
    tokens_per_s: float
    payload_bytes: int
    ratio: float
    codec: str
    push_s: float
    idle_s: float
    train_s: float
    skipped_steps: int = 0  # steps of the round whose loss or gradient was not finite (skipped, as GradScaler does)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def read_token(cfg: ClientConfig) -> str:
    """The one-time token from --token-file or GEOFED_TOKEN (read lazily: it may be rotated by the operator)."""
    if cfg.token_file:
        return Path(cfg.token_file).read_text().strip()
    return os.environ.get("GEOFED_TOKEN", "").strip()


class ClientAgent:
    """One site's client; `run()` returns when a stop condition is met."""

    def __init__(self, cfg: ClientConfig) -> None:
        self.cfg = cfg
        self.work = Path(cfg.work_dir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.t_start = time.monotonic()
        self.metrics_path = self.work / "metrics.jsonl"
        self.first_step_at: float | None = None

    def _ps_client(self) -> PSClient:
        cfg = self.cfg

        def read(p: str | None) -> bytes | None:
            return Path(p).read_bytes() if p else None

        client = PSClient(cfg.ps, cfg.client_id, lambda: read_token(cfg), insecure=cfg.insecure,
                          ca_cert=read(cfg.ca), client_cert=read(cfg.cert), client_key=read(cfg.key),
                          state_dir=self.work, join_deadline_s=cfg.join_timeout_s, retry_budget_s=cfg.retry_budget_s)
        return client

    def run(self) -> int:
        signal.signal(signal.SIGTERM, _raise_preempted)
        # transformers' model code takes seconds to import; do it while data loads and we Join (rejoin time).
        # transformers' lazy modules are not safe to import from two threads: _run joins this first.
        self._preload = threading.Thread(target=_preload_model_code, name="geofed-preload", daemon=True)
        self._preload.start()
        ps = self._ps_client()
        close = ps.close
        try:
            return self._run(ps)
        except Preempted:
            log.info("event=preempted client=%s", self.cfg.client_id)
            # The signal may have interrupted a gRPC call or a lock of the channel's: closing could wait on
            # what it broke, and a preempted pod must leave at once. Close in the background, bounded.
            close = partial(_within, ps.close, PREEMPTED_CLOSE_S)
            return PREEMPTED_EXIT
        finally:
            close()

    def _run(self, ps: PSClient) -> int:
        cfg = self.cfg
        ranks = Ranks(cfg.process_group_timeout_s)
        # Data first: a bad data directory must fail before the one-time token is spent.
        if cfg.tokenizer is not None:
            self._preload.join()  # AutoTokenizer imports transformers too: never two threads in its lazy modules
        tokenizer = load_tokenizer(cfg.tokenizer)
        tokens, report = load_tokens(_data_source(cfg.data), tokenizer, cache=self.work / "tokens.npy")
        if report.skipped:
            log.warning("event=data_skipped files=%d paths=%s", report.skipped, list(report.skipped_paths)[:5])
        # Only rank 0 reads the checkpoint (on a multi-node site the file is on its node alone) and shares it.
        resumed = ranks.share_resume(CheckpointManager(self.work / "checkpoints").load_latest() if ranks.leader
                                     else None)
        # A site that ran shard-wise has a sharded checkpoint instead (every rank wrote its own shards).
        shard_meta = sharded_meta(self.work) if ranks.leader else None
        declared = _newest_declaration(resumed, shard_meta)

        # Declare what we ran: a federation that changed refuses us at Join.
        spec = JoinSpec(paradigm=declared[0] if declared else "",
                        manifest=tuple(TensorEntry(n, tuple(s), d) for n, s, d in declared[1]) if declared else (),
                        group=cfg.group or "", decoders=_downlink_decoders)

        def join() -> tuple[str, bool]:
            # A tokenizer the model cannot embed: refuse before a token is spent when the federation is known,
            # else right after Join (the saved rejoin token serves the corrected relaunch).
            if (vocab := _cached_vocab(self.work / FEDERATION_CACHE)) is not None:
                check_vocab(tokenizer, vocab)
            ps.join(spec)
            joined = ps.federation.model_dump_json()
            (self.work / FEDERATION_CACHE).write_text(joined)
            check_vocab(tokenizer, ps.federation.model.vocab_size)
            master = ps.master and ps.join_version == 0
            if not master:
                if resumed is not None:
                    _hold_base(ps, resumed)
                ps.start()  # fetch the global model while the model is being built
            return joined, master

        # Rank 0 joins while the other ranks wait in short polls (`Ranks.lead`): a slow PS cannot time them out.
        fed_json, bootstrap = ranks.lead(join) or (None, False)
        fed = FederationConfig.model_validate_json(ranks.bcast_text(fed_json))
        bootstrap = ranks.bcast_flag(bootstrap)
        device = ranks.device(pick_device(cfg.device))
        # The error-feedback residual (two model-sized vectors read from the mmap, checked, copied, hashed) needs
        # only the checkpoint: restore it now, beside the model code import and the transfer (rejoin time, issue 14).
        restoring = (_in_thread(partial(_restore_residual, resumed.residual, fed.codec.error_feedback_decay,
                                        cfg.client_id))
                     if isinstance(resumed, ClientCheckpoint) and resumed.residual and fed.codec.error_feedback
                     and ranks.leader else None)
        self._preload.join()
        paradigm = client_paradigm(fed.paradigm)
        paradigm.bind_ps(ps)
        # Only the master's Θ0 needs a random init when everything is exchanged; a paradigm that keeps a
        # frozen part builds it on every client (`shell_ok`).
        route = self._route(ranks, fed, paradigm, shard_meta is not None)
        if route.shard_wise and ranks.distributed and not bootstrap and paradigm.shell_ok and not fed.model.path:
            model = paradigm.prepare(build_on_meta(fed.model))  # only this rank's shards are ever allocated
        else:
            model = paradigm.prepare(paradigm.build(fed, initialise=bootstrap))
        self._check_layout(ps, paradigm, model, ranks)
        if resumed is not None and resumed.private:
            paradigm.load_private_state(model, resumed.private)  # before sharding: full tensors here
            log.info("event=private_restored client=%s tensors=%d sha256=%s", cfg.client_id, len(resumed.private),
                     private_digest(resumed.private))
        precision = pick_precision(fed.training.precision, device)
        if ranks.distributed:
            model = shard_model(model, precision)  # only this rank's shards are allocated on the device
        if fed.training.torch_threads:
            torch.set_num_threads(fed.training.torch_threads)
        stream = TokenStream(tokens, fed.model.block_size, seed=cfg.seed, eval_fraction=fed.training.eval_fraction)
        trainer = LocalTrainer(model, fed.training, stream, device, precision=precision, slowdown=cfg.slowdown,
                               rank=ranks.rank, world=ranks.world, micro_batch_size=cfg.micro_batch_size or None)
        ckpts = CheckpointManager(self.work / "checkpoints", keep_best=fed.training.keep_best)
        self.manifest = paradigm.manifest(model)
        numel = paradigm.payload_numel(sum(t.numel for t in self.manifest))
        self.tuner = LinkTuner(fed, ps.link, numel, cfg.client_id)
        shards = self._shard_sync(ranks, fed, paradigm, numel) if route.shard_wise else None
        ef = (ErrorFeedback(numel, fed.codec.error_feedback_decay)
              if fed.codec.error_feedback and ranks.leader and shards is None else None)
        saved_upload: tuple[bytes, bytes] | None = None
        if shards is not None and ranks.bcast_flag(shard_meta is not None):
            meta = shards.load(model, trainer.optimizer)  # every rank its own shards, on any rank count
            if resumed is None or resumed.step <= meta["step"]:  # else the whole-vector one is newer: it wins
                trainer.load_progress(meta)
                saved_upload = shards.saved_upload(meta) if ranks.leader else None
                resumed = _ShardResume(meta["base_version"])
        if isinstance(resumed, ClientCheckpoint):
            trainer.load_state_dict(resumed.trainer_state())
            if shards is not None:
                log.info("event=error_feedback_not_carried client=%s reason=%r", cfg.client_id,
                         "a whole-vector checkpoint resumed shard-wise: the residual starts at zero")
            if ef is not None and restoring is not None:
                ef = _restored_residual(restoring, numel)
            if resumed.upload:  # preempted mid-push: that delta is resent below, its data is not trained again
                saved_upload = tuple(bytes(resumed.upload[k].numpy()) for k in ("header", "payload"))
            log.info("event=resumed client=%s rank=%d step=%d base_version=%d", cfg.client_id, ranks.rank,
                     resumed.step, resumed.base_version)
        if bootstrap and shards is not None:
            self._bootstrap_shards(ps, ranks, shards, paradigm, model, resumed)
        elif bootstrap:
            self._bootstrap(ps, ranks, paradigm, model, resumed)
        resumed = None  # drop the mmap of the old file: the next save replaces it, and its space should go

        delta = torch.empty(numel, dtype=torch.float32) if ranks.leader and shards is None else None
        rounds = bad_rounds = 0

        if shards is not None and ranks.bcast_flag(saved_upload is not None):
            status = ranks.lead(partial(self._resend, ps, saved_upload, None))
            shards.settle(ranks.bcast_flag(status in TAKEN))
            saved_upload = None

        def first_model() -> GlobalVersion:
            if saved_upload is not None:
                self._resend(ps, saved_upload, ef)
            return self._first_model(ps, cfg.model_wait_timeout_s)

        global_model = ranks.lead(first_model)
        while True:
            if shards is not None:
                shards.adopt(trainer.model, global_model.flat if global_model else None)
            else:
                paradigm.adopt(ranks, trainer.model, global_model.flat if global_model else None)
            if not fed.training.keep_optimizer_state and rounds:
                trainer.reset_optimizer()  # FedAvg-style: every round starts AdamW afresh on the new model
            if self.first_step_at is None:
                self.first_step_at = time.monotonic() - self.t_start
                log.info("event=first_step client=%s seconds_since_start=%.2f", cfg.client_id, self.first_step_at)
            interval_s, local_steps = self._interval(ranks)
            deadline = time.monotonic() + interval_s
            if cfg.duration_s:
                deadline = min(deadline, self.t_start + cfg.duration_s)
            remaining = fed.training.max_steps - trainer.step if fed.training.max_steps else local_steps
            try:
                stats = paradigm.local_update(trainer, min(local_steps, remaining), deadline,
                                              global_model.version if global_model else 0)
                self.tuner.step_s = stats.step_s or self.tuner.step_s
            except NonFiniteLossError as exc:  # every rank raises it: the skip decision is global
                bad_rounds += 1
                log.warning("event=non_finite_round client=%s step=%d detail=%r", cfg.client_id, trainer.step, str(exc))
                if bad_rounds >= MAX_NON_FINITE_ROUNDS:
                    raise
                continue  # back to the global model (the loop's first line); nothing is pushed for this round
            bad_rounds = 0
            eval_loss = None
            if trainer.step // fed.training.eval_every != (trainer.step - stats.steps) // fed.training.eval_every:
                eval_loss = trainer.evaluate(fed.training.eval_batches)
            rounds += 1
            if shards is not None:
                outcome, done = self._sync_shards(ps, fed, ranks, shards, trainer, global_model, stats, eval_loss,
                                                  numel, rounds, paradigm.name)
            else:
                paradigm.delta(ranks, delta, trainer.model, global_model.flat if global_model else None)
                state = trainer.state_dict()  # collective under FSDP: gathers optimizer state to rank 0
                state["private"] = paradigm.private_state(trainer.model)
                # Rank 0 checkpoints and pushes while the other ranks wait in short polls (`Ranks.lead`).
                outcome, done = ranks.lead(partial(
                    self._sync, ps, fed, ckpts, global_model, delta, ef, stats, eval_loss, state, trainer.step,
                    numel, rounds, paradigm)) or (None, False)
            done = ranks.bcast_flag(done)
            if not ranks.leader:
                if done:
                    return 0
                ranks.lead(lambda: None)  # while rank 0 waits for the next model
                continue
            base_version = global_model.version
            t_idle = time.monotonic()
            if not done:
                global_model = ranks.lead(
                    partial(self._next_model, ps, fed, global_model, outcome.status, outcome.version))
            self._record(RoundRecord(
                time.time(), cfg.client_id, rounds, trainer.step, base_version, outcome.version, outcome.status,
                outcome.staleness, stats.mean_loss, eval_loss, stats.tokens_per_s, outcome.payload_bytes,
                outcome.payload_bytes / max(1, 4 * numel), outcome.codec, outcome.seconds,
                time.monotonic() - t_idle, stats.seconds, stats.skipped_steps,
            ))
            if done:
                return 0

    def _sync(self, ps: PSClient, fed: FederationConfig, ckpts: CheckpointManager, base: GlobalVersion,
              delta: torch.Tensor, ef: ErrorFeedback | None, stats, eval_loss: float | None, state: dict, step: int,
              numel: int, rounds: int, paradigm: ClientParadigm) -> tuple[PushOutcome, bool]:
        """Rank 0's part of a sync: checkpoint and push the round; whether to stop after it."""
        model_flat = paradigm.checkpoint_flat(delta, base.flat)

        def save(upload: Upload) -> None:
            self._checkpoint(ckpts, state, model_flat, base, ef, eval_loss, step, paradigm.name, upload)

        outcome = self._push(ps, fed, base, delta, ef, stats, eval_loss, step, numel, save)
        return outcome, self._should_stop(rounds, step, fed)

    def _push(self, ps: PSClient, fed: FederationConfig, base: GlobalVersion, delta: torch.Tensor,
              ef: ErrorFeedback | None, stats, eval_loss: float | None, step: int, numel: int,
              save: Callable[[Upload], None]) -> PushOutcome:
        """Encode δ (int8/int16 by link rate, with error feedback) and push it (Algorithm 1: send δc).

        `save(upload)` checkpoints the round, upload included, before anything is sent: a client preempted
        mid-push resends that upload when relaunched (DUPLICATE if it had landed) instead of training again.
        The error-feedback residual moves on only when the PS took the delta.
        """
        values = delta.numpy()
        codec = self.tuner.codec(self.tuner.codec_name(values))
        cut = {"cuts": ps.shard_cuts} if ps.shard_cuts else {}  # a sharded PS: frames end at its shard bounds
        header, frames = ef.encode(codec, values, **cut) if ef is not None else codec.encode(values, **cut)
        ps.report = {"train_loss": stats.mean_loss, "eval_loss": eval_loss or 0.0,
                     "tokens_per_s": stats.tokens_per_s, "bytes_sent": ps.bytes_sent, "step": step}
        upload = ps.prepare(base_version=base.version, codec_header=header, frames=frames, num_tokens=stats.tokens,
                            num_samples=stats.samples, local_steps=max(1, stats.steps))
        save(upload)
        outcome = self._send(ps, upload, base, codec.name)
        if ef is not None:
            # A stale delta was not applied at all: its quantisation error must not carry over.
            ef.discard() if outcome.status == "STALE" else ef.commit()
        return outcome

    def _send(self, ps: PSClient, upload: Upload, base: GlobalVersion, codec: str) -> PushOutcome:
        """Send a prepared upload; a stale one comes back as the STALE outcome (the caller resyncs)."""
        try:
            r = ps.send(upload)
        except StaleDeltaError as exc:
            log.warning("event=delta_stale client=%s detail=%r", self.cfg.client_id, str(exc))
            latest = ps.latest()
            return PushOutcome("STALE", latest.version if latest else base.version, 0, 0, 0.0, codec)
        return PushOutcome(r.status, r.version, r.staleness, r.payload_bytes, r.seconds, codec)

    def _route(self, ranks: Ranks, fed: FederationConfig, paradigm: ClientParadigm,
               sharded_checkpoint: bool) -> Route:
        """Shard-wise or gather-on-rank-0 (`shard_route`), the same on every rank; the reason is logged."""
        route = shard_route(ranks.world, paradigm.name, fed.codec.name,
                            ranks.bcast_flag(sharded_checkpoint if ranks.leader else None))
        if ranks.leader:
            log.info("event=sync_path client=%s shard_wise=%s ranks=%d reason=%r", self.cfg.client_id,
                     route.shard_wise, ranks.world, route.reason)
        return route

    def _shard_sync(self, ranks: Ranks, fed: FederationConfig, paradigm: ClientParadigm, numel: int) -> ShardSync:
        """This rank's shard-wise sync state: its range of the flat vector, its residual, its checkpoint."""
        return ShardSync(self.work, ranks.rank, ranks.world, numel, paradigm.exchanged, block=self.tuner.block(),
                         error_feedback=fed.codec.error_feedback, decay=fed.codec.error_feedback_decay)

    def _sync_shards(self, ps: PSClient, fed: FederationConfig, ranks: Ranks, shards: ShardSync,
                     trainer: LocalTrainer, base: GlobalVersion | None, stats, eval_loss: float | None, numel: int,
                     rounds: int, paradigm: str) -> tuple[PushOutcome | None, bool]:
        """Every rank's part of a shard-wise sync: diff, encode and relay its slice, checkpoint its shards;
        rank 0 then pushes (in `Ranks.lead`) and every rank settles its residual by the outcome."""
        values = shards.delta(trainer.model)
        name = ranks.bcast_text(self.tuner.codec_name() if ranks.leader else None)
        codec = self.tuner.codec(name)
        version = ranks.bcast_text(str(base.version) if ranks.leader else None)
        # A sharded PS's bounds, as rank 0 last learnt them (Join, or a model transfer after a STALE push).
        shards.cuts = tuple(json.loads(ranks.bcast_text(json.dumps(list(ps.shard_cuts)) if ranks.leader else None)))

        def spool(header: bytes, frames) -> Upload:
            ps.report = {"train_loss": stats.mean_loss, "eval_loss": eval_loss or 0.0,
                         "tokens_per_s": stats.tokens_per_s, "bytes_sent": ps.bytes_sent, "step": trainer.step}
            return ps.prepare(base_version=base.version, codec_header=header, frames=frames, num_tokens=stats.tokens,
                              num_samples=stats.samples, local_steps=max(1, stats.steps))

        upload = shards.encode(codec, values, spool if ranks.leader else None)
        del values
        meta = {"step": trainer.step, "data_position": trainer.stream.state_dict(),
                "scaler": trainer.scaler.state_dict(), "base_version": int(version), "eval_loss": eval_loss,
                "paradigm": paradigm, "manifest": [[t.name, list(t.shape), t.dtype] for t in self.manifest]}
        shards.save(trainer.step, trainer.model, trainer.optimizer, meta, upload)  # before the push, as `_push`
        outcome = ranks.lead(partial(self._send, ps, upload, base, name))
        shards.settle(ranks.bcast_flag(outcome is not None and outcome.status != "STALE"))
        return outcome, bool(ranks.leader and self._should_stop(rounds, trainer.step, fed))

    def _bootstrap_shards(self, ps: PSClient, ranks: Ranks, shards: ShardSync, paradigm: ClientParadigm,
                          model: torch.nn.Module, resumed) -> None:
        """Θ0 (or a re-seed from the sharded checkpoint, §III-B4) pushed slice by slice, never gathered."""
        base = resumed.base_version if resumed is not None else 0
        if isinstance(resumed, ClientCheckpoint):  # a whole-vector checkpoint (written on one rank): its model
            shards.adopt(model, resumed.model.numpy() if ranks.leader else None)
        values = shards.current(model)

        def spool(header: bytes, frames) -> Upload:
            ps.start()
            return ps.prepare(base_version=base, codec_header=header, frames=frames, init=True,
                              manifest=paradigm.manifest(model))

        upload = shards.encode(make_codec("fp32"), values, spool if ranks.leader else None, delta=False)

        def send() -> None:
            receipt = ps.send(upload)
            log.info("event=bootstrapped client=%s version=%d reseed=%s shard_wise=True", self.cfg.client_id,
                     receipt.version, base > 0)

        ranks.lead(send)

    def _resend(self, ps: PSClient, saved: tuple[bytes, bytes], ef: ErrorFeedback | None) -> str:
        """Relaunched after a preemption mid-push: send that upload again under its own id."""
        upload = Upload.restored(*saved)
        try:
            status = ps.send(upload).status
        except (StaleDeltaError, PushError) as exc:  # refused: that round's data is lost, never counted twice
            status = "REFUSED"
            log.warning("event=upload_refused upload=%s detail=%r", upload.upload_id, str(exc))
        if ef is not None:
            ef.commit() if status in TAKEN else ef.discard()
        log.info("event=upload_resent upload=%s status=%s", upload.upload_id, status)
        return status

    def _bootstrap(self, ps: PSClient, ranks: Ranks, paradigm: ClientParadigm, model: torch.nn.Module,
                   resumed: ClientCheckpoint | None) -> None:
        """Fig. 1 step 2: stream Θ0 to the PS; after a total PS loss, re-seed from our own checkpoint (§III-B4)."""
        base = 0
        if resumed is not None and isinstance(resumed.model, torch.Tensor) and resumed.model.numel():
            paradigm.adopt(ranks, model, resumed.model if ranks.leader else None)
            base = resumed.base_version
        flat = paradigm.full_exchanged(ranks, model)

        def push() -> None:
            ps.start()
            header, frames = make_codec("fp32").encode(flat.numpy())
            receipt = ps.push(base_version=base, codec_header=header, frames=frames, init=True,
                              manifest=paradigm.manifest(model))
            log.info("event=bootstrapped client=%s version=%d reseed=%s", self.cfg.client_id, receipt.version,
                     base > 0)

        ranks.lead(push)

    @staticmethod
    def _first_model(ps: PSClient, timeout_s: float) -> GlobalVersion:
        """The first global model; JoinError (exit 3, a readable reason) if the master never installs one."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            got = ps.wait_for_version(0, timeout=min(30.0, left))
            if got is not None:
                return got
            log.info("event=waiting_for_model newer_than=0")
        raise JoinError(
            f"NoGlobalModel: the PS has no global model after {timeout_s:.0f}s; the federation's master client "
            "has not installed it (Kubernetes: the Federation's spec.server.masterClientID names the master; "
            "is its SiteClient running?)"
        )

    def _next_model(self, ps: PSClient, fed: FederationConfig, current: GlobalVersion, status: str,
                    version: int) -> GlobalVersion:
        """sync: wait for the round to close; async: adopt the newest version (ours, if it was applied).

        The mode is the one the PS said it runs in its last push response (aggregation.mode 'auto' switches it
        between rounds), else the FederationConfig's, as for a PS that predates the field.
        """
        if status == "STALE":  # resync: any model the PS streams next (it may be older after a PS restart)
            while True:
                got = ps.wait_for_fresh(current, timeout=30.0)
                if got is not None:
                    return got
                log.info("event=waiting_for_model after=stale")
        if (ps.aggregation_mode or initial_mode(fed.aggregation.mode)) == "sync":
            while True:
                got = ps.wait_for_version(current.version, timeout=5.0)
                if got is not None:
                    return got
                fresh = ps.latest()
                if fresh is not None and fresh is not current and fresh.version < current.version:
                    return fresh  # the PS restarted behind us: its round will never reach our version
                log.info("event=waiting_for_round version=%d", current.version)
        if status == "APPLIED":
            got = ps.wait_for_version(version - 1, timeout=30.0)
            if got is not None:
                return got
        latest = ps.latest()
        return latest if latest is not None and latest.version >= current.version else current

    def _interval(self, ranks: Ranks) -> tuple[float, int]:
        """T and H of the next round, rank 0's choice (`LinkTuner.interval`) on every rank."""
        seconds, steps = json.loads(ranks.bcast_text(json.dumps(self.tuner.interval()) if ranks.leader else None))
        return float(seconds), int(steps)

    def _check_layout(self, ps: PSClient, paradigm: ClientParadigm, model: torch.nn.Module, ranks: Ranks) -> None:
        """The PS announced its layout at Join: a model that exchanges something else must stop here, clearly."""
        if not ranks.leader or not ps.manifest:
            return
        try:
            check_manifest(model, ps.manifest, paradigm.exchanged)
        except ManifestMismatch as exc:
            raise ManifestMismatch(f"paradigm {paradigm.name!r}: {exc}") from None

    def _checkpoint(self, ckpts: CheckpointManager, state: dict, model_flat: torch.Tensor, base: GlobalVersion,
                    ef: ErrorFeedback | None, eval_loss: float | None, step: int, paradigm: str,
                    upload: Upload) -> None:
        """One atomic file every sync, written just before its push, plus the K lowest-eval-loss ones (§III-B4)."""
        header, payload = upload.saved()
        ckpt = ClientCheckpoint(
            model=model_flat, optimizer=state["optimizer"], step=state["step"],
            data_position=state["data_position"], base_version=base.version,
            residual=ef.state_dict() if ef is not None else {}, scaler=state.get("scaler", {}), eval_loss=eval_loss,
            private=state.get("private", {}), paradigm=paradigm,
            manifest=[[t.name, list(t.shape), t.dtype] for t in self.manifest],
            upload={"header": _bytes_tensor(header), "payload": _bytes_tensor(payload)},
            base_model=_read_only_tensor(base.flat), base_instance=base.instance,
        )
        ckpts.save_latest(ckpt)
        if eval_loss is not None:
            ckpts.consider(eval_loss, step, dataclasses.replace(ckpt, upload={}, base_model=None))

    def _should_stop(self, rounds: int, step: int, fed: FederationConfig) -> bool:
        cfg = self.cfg
        if cfg.max_rounds and rounds >= cfg.max_rounds:
            return True
        if fed.training.max_steps and step >= fed.training.max_steps:
            return True
        return bool(cfg.duration_s and time.monotonic() - self.t_start >= cfg.duration_s)

    def _record(self, rec: RoundRecord) -> None:
        line = json.dumps(rec.__dict__)
        with open(self.metrics_path, "a") as f:
            f.write(line + "\n")
        log.info("event=sync client=%s round=%d step=%d version=%d status=%s loss=%.4f bytes=%d ratio=%.3f",
                 rec.client, rec.round, rec.step, rec.version, rec.status, rec.train_loss, rec.payload_bytes,
                 rec.ratio)


@dataclass(frozen=True)
class _ShardResume:
    """What a sharded checkpoint tells the bootstrap (a re-seed after total PS loss starts at its version)."""

    base_version: int


def _newest_declaration(resumed: ClientCheckpoint | None, meta: dict | None) -> tuple[str, list] | None:
    """(paradigm, manifest) of the newer of the two checkpoints a site may have, declared at Join."""
    if meta is not None and (resumed is None or meta["step"] >= resumed.step):
        return meta["paradigm"], meta["manifest"]
    return (resumed.paradigm, resumed.manifest) if resumed is not None else None


def _downlink_decoders(fed: FederationConfig) -> dict:
    """A paradigm may stream its own encoding (zo: one scalar per seed); the stream thread decodes it."""
    return client_paradigm(fed.paradigm).downlink_decoders()


def _preload_model_code() -> None:
    grid_apply.warm()  # numba's import and cache load (~0.3 s), before the first model difference needs them
    import transformers.models.gpt2.modeling_gpt2  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401


def _in_thread(fn: Callable[[], object], name: str = "geofed-restore") -> Future:
    """Run `fn` in a daemon thread; its result or exception comes out of the returned future."""
    done: Future = Future()

    def run() -> None:
        try:
            done.set_result(fn())
        except BaseException as exc:  # handed to whoever waits on `done`
            done.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


def _restore_residual(residual: dict[str, torch.Tensor], decay: float, client_id: str) -> ErrorFeedback:
    """The checkpoint's error feedback, sized by its own residual (`_restored_residual` checks it fits the model)."""
    ef = ErrorFeedback(residual["residual"].numel() if "residual" in residual else 0, decay)
    ef.load_state_dict(residual)
    log.info("event=error_feedback_restored client=%s residual_sha256=%s staged=%s", client_id,
             hashlib.sha256(ef.residual.tobytes()).hexdigest(), ef.staged is not None)
    return ef


def _restored_residual(restoring: Future, numel: int) -> ErrorFeedback:
    """The residual restored in `restoring` (its error raised here), refused unless it has the model's size."""
    ef = restoring.result()
    if ef.numel != numel:
        raise CodecError(f"residual must be float32 of shape ({numel},), got float32 ({ef.numel},)")
    return ef


def _within(fn: Callable[[], object], seconds: float) -> None:
    """Run `fn` in a daemon thread and wait at most `seconds` for it (a hung cleanup must not hold the exit)."""
    done = _in_thread(fn, "geofed-close")
    try:
        done.result(timeout=seconds)
    except TimeoutError:
        log.warning("event=close_abandoned after_s=%g", seconds)
    except Exception:  # noqa: BLE001 - a failed cleanup is reported, never raised into the exit path
        log.warning("event=close_failed", exc_info=True)


def _raise_preempted(signum, frame):
    raise Preempted()


def _hold_base(ps: PSClient, resumed: ClientCheckpoint) -> None:
    """Offer the PS client the exact global model the checkpointed round started from (see `PSClient.hold`)."""
    base = resumed.base_model
    if base is None or not base.numel():
        return
    kept = GlobalVersion(resumed.base_version, base.numpy(), ps.manifest, instance=resumed.base_instance)
    log.info("event=model_held version=%d use=%s", kept.version, ps.hold(kept))


def _read_only_tensor(flat) -> torch.Tensor:
    """A tensor over a published (read-only) model vector, without a copy; only ever read (by torch.save)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(flat)


def _bytes_tensor(data: bytes) -> torch.Tensor:
    """`data` as a uint8 tensor (what a weights-only checkpoint can hold)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _cached_vocab(path: Path) -> int | None:
    """The model vocabulary of the federation saved at the last Join, if one was saved and is readable."""
    try:
        return FederationConfig.model_validate_json(path.read_text()).model.vocab_size
    except (OSError, ValueError):
        return None


def _data_source(data: str):
    """A directory, or a `.list` file naming one file per line (how `geofed local` splits a corpus)."""
    p = Path(data)
    if p.suffix == ".list":
        return read_file_list(p)
    return p
