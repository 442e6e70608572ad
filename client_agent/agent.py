"""The client agent's sync loop (Algorithm 1, client side; paper Fig. 1 steps 1-6).

Join with a one-time token; the master bootstraps Θ0 (`site.set_up`); then repeat: adopt the newest global
model, train H steps or T seconds, evaluate, push δ = θ_local − θ_base compressed and checkpointed (the
site's `SyncPath`), wait for the next model, record the round. A relaunched client resumes its optimizer
state and data position from its own checkpoint and the model from the PS.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from geofed.config import ClientConfig

from .connection import grid_apply
from .connection.model_waits import first_model
from .connection.ps_client import GlobalVersion, PSClient
from .preemption import PREEMPTED_EXIT, Preempted, arm_preemption, preempted
from .site import Site, set_up
from .sync import RoundResult, SyncedRound
from .threads import in_thread
from .training.ranks import Ranks
from .training.trainer import NonFiniteLossError, TrainStats

log = logging.getLogger("geofed.client")

PREEMPTED_CLOSE_S = 5.0  # how long a preempted agent waits for its PS connection to close
MAX_NON_FINITE_ROUNDS = 3  # rounds in a row with no finite step before the client gives up


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
    lr: float = 0.0  # the inner learning rate of the round's last step


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

        return PSClient(
            cfg.ps,
            cfg.client_id,
            lambda: read_token(cfg),
            insecure=cfg.insecure,
            ca_cert=read(cfg.ca),
            client_cert=read(cfg.cert),
            client_key=read(cfg.key),
            state_dir=self.work,
            join_deadline_s=cfg.join_timeout_s,
            retry_budget_s=cfg.retry_budget_s,
        )

    def run(self) -> int:
        arm_preemption()
        log.info("event=agent_started client=%s", self.cfg.client_id)  # the agent's code is imported
        # numba's import and cache load run while data loads and we Join (rejoin time); set_up joins this
        # before the model build's own imports.
        preload = threading.Thread(target=_preload_model_code, name="geofed-preload", daemon=True)
        preload.start()
        ps = self._ps_client()
        close = ps.close
        try:
            ranks = Ranks(self.cfg.process_group_timeout_s)
            site = set_up(self.cfg, self.work, ps, ranks, preload)
            try:
                return self.loop(ps, ranks, site)
            finally:
                site.sync.close()
        except BaseException as exc:
            if not preempted():
                raise
            # What the signal interrupted may raise an error of its own on the way out (a library's cleanup
            # finding its state half-changed, an exception raised while handling Preempted): still preempted.
            interrupted = "" if isinstance(exc, Preempted) else f" raised={exc!r}"
            log.info("event=preempted client=%s%s", self.cfg.client_id, interrupted)
            # The signal may have interrupted a gRPC call or a lock of the channel's: closing could wait on
            # what it broke, and a preempted pod must leave at once. Close in the background, bounded.
            close = partial(_within, ps.close, PREEMPTED_CLOSE_S)
            return PREEMPTED_EXIT
        finally:
            close()

    def loop(self, ps: PSClient, ranks: Ranks, site: Site) -> int:
        """The rounds: adopt → local update → evaluate → push → next model → record, until a stop condition."""
        fed, trainer, sync = site.fed, site.trainer, site.sync
        global_model = ranks.lead(
            partial(first_model, ps, self.cfg.model_wait_timeout_s, self.cfg.model_wait_notice_s))
        if site.clock is not None:
            site.clock.first_model()
        rounds = bad_rounds = 0
        while True:
            sync.adopt(trainer.model, global_model)
            if not fed.training.keep_optimizer_state and rounds:
                trainer.reset_optimizer()  # FedAvg-style: every round starts AdamW afresh on the new model
            if ranks.leader and global_model is not None:  # the heartbeats report the round from here on
                ps.progress.start(global_model.version, lambda: trainer.step, trainer.tokens_per_step)
            try:
                stats = self._local_update(ranks, site, global_model)
            except NonFiniteLossError as exc:  # every rank raises it: the skip decision is global
                bad_rounds += 1
                log.warning(
                    "event=non_finite_round client=%s step=%d detail=%r", self.cfg.client_id, trainer.step, str(exc)
                )
                if bad_rounds >= MAX_NON_FINITE_ROUNDS:
                    raise
                continue  # back to the global model (the loop's first line); nothing is pushed for this round
            bad_rounds = 0
            eval_loss, eval_metrics = self._evaluate(site, stats)
            rounds += 1
            result = RoundResult(global_model, stats, eval_loss, rounds, trainer.step, eval_metrics)
            end = sync.sync_round(trainer, result, partial(self._should_stop, rounds, trainer.step, site))
            for synced in end.synced:
                self._record(synced, site.numel)
            if end.done:
                return 0
            global_model = end.model

    def _local_update(self, ranks: Ranks, site: Site, global_model: GlobalVersion | None) -> TrainStats:
        """Algorithm 1's local loop for T seconds or H steps (the tuner's, the same on every rank)."""
        fed, trainer = site.fed, site.trainer
        if self.first_step_at is None:
            self.first_step_at = time.monotonic() - self.t_start
            log.info("event=first_step client=%s seconds_since_start=%.2f", self.cfg.client_id, self.first_step_at)
        seconds, steps = json.loads(ranks.bcast_text(json.dumps(site.tuner.interval()) if ranks.leader else None))
        deadline = time.monotonic() + float(seconds)
        if self.cfg.duration_s:
            deadline = min(deadline, self.t_start + self.cfg.duration_s)
        remaining = fed.training.max_steps - trainer.step if fed.training.max_steps else int(steps)
        stats = site.paradigm.local_update(
            trainer, min(int(steps), remaining), deadline, global_model.version if global_model else 0
        )
        site.tuner.step_s = stats.step_s or site.tuner.step_s
        return stats

    @staticmethod
    def _evaluate(site: Site, stats: TrainStats) -> tuple[float | None, dict[str, float]]:
        """The eval loss and the paradigm's own held-out metrics when this round crossed a multiple of
        training.eval_every steps, else (None, {})."""
        every, step = site.fed.training.eval_every, site.trainer.step
        if step // every != (step - stats.steps) // every:
            return site.trainer.evaluate(site.fed.training.eval_batches), site.paradigm.eval_metrics(site.trainer)
        return None, {}

    def _should_stop(self, rounds: int, step: int, site: Site) -> bool:
        cfg, max_steps = self.cfg, site.fed.training.max_steps
        if cfg.max_rounds and rounds >= cfg.max_rounds:
            return True
        if max_steps and step >= max_steps:
            return True
        return bool(cfg.duration_s and time.monotonic() - self.t_start >= cfg.duration_s)

    def _record(self, synced: SyncedRound, numel: int) -> None:
        result, outcome = synced.result, synced.outcome
        stats = result.stats
        rec = RoundRecord(
            time.time(),
            self.cfg.client_id,
            result.round,
            result.step,
            result.base.version,
            outcome.version,
            outcome.status,
            outcome.staleness,
            stats.mean_loss,
            result.eval_loss,
            stats.tokens_per_s,
            outcome.payload_bytes,
            outcome.payload_bytes / max(1, 4 * numel),
            outcome.codec,
            synced.push_s,
            synced.idle_s,
            stats.seconds,
            stats.skipped_steps,
            stats.lr,
        )
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(rec.__dict__) + "\n")
        log.info(
            "event=sync client=%s round=%d step=%d version=%d status=%s loss=%.4f bytes=%d ratio=%.3f",
            rec.client,
            rec.round,
            rec.step,
            rec.version,
            rec.status,
            rec.train_loss,
            rec.payload_bytes,
            rec.ratio,
        )


def _preload_model_code() -> None:
    """What the first round needs that takes a while to import. Not transformers: the default model is
    `client_agent.training.gpt2`'s, and a model that needs transformers imports it in the build (`site._build`)."""
    grid_apply.warm()  # numba's import and cache load (~0.3 s), before the first model difference needs them


def _within(fn: Callable[[], object], seconds: float) -> None:
    """Run `fn` in a daemon thread and wait at most `seconds` for it (a hung cleanup must not hold the exit)."""
    done = in_thread(fn, "geofed-close")
    try:
        done.result(timeout=seconds)
    except TimeoutError:
        log.warning("event=close_abandoned after_s=%g", seconds)
    except Exception:  # noqa: BLE001 - a failed cleanup is reported, never raised into the exit path
        log.warning("event=close_failed", exc_info=True)
