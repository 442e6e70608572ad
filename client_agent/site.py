"""A site's start, before its first round: data, the checks, Join, the model, the trainer and the sync path.

Data first (a bad data directory fails before the one-time token is spent); rank 0 previews the Join (the
token is checked, not spent) and the site's tokenizer, data and device are checked against the federation
(`preflight`); the model is built in a thread, the way the sync path needs it, while rank 0 joins and the
first global model streams in, and the digest of its frozen part is declared (a federation whose digest
differs refuses it); the site's checkpoint is restored; the master bootstraps Θ0 (or re-seeds it after a
total PS loss); an upload a preemption interrupted is resent.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from geofed.config import ClientConfig, FederationConfig
from geofed.manifest import TensorEntry

from .connection.join_spec import JoinSpec
from .connection.link_tuner import LinkTuner, codec_policy
from .connection.ps_client import GlobalVersion, PSClient
from .data.corpus import read_file_list
from .data.files import TrainingData, load_data
from .data.tokenizer import Tokenizer, check_identity, load_tokenizer
from .errors import JoinError
from .paradigms import ClientParadigm, client_paradigm
from .preflight import Checked, check_before_join
from .sync import SyncContext, SyncPath, overlap_kept_off, start_restore, sync_route
from .threads import in_thread
from .training.checkpoint import CheckpointManager, ClientCheckpoint
from .training.flat import ManifestMismatch, check_manifest
from .training.fsdp import build_on_meta, shard_model
from .training.ranks import Ranks
from .training.run_clock import RunClock
from .training.slices.state import sharded_meta
from .training.trainer import LocalTrainer

log = logging.getLogger("geofed.client")

BUILD_CACHE = "build.json"  # the paradigm settings and frozen digest of the last model built: declared at Join


@dataclass(frozen=True)
class Site:
    """What the round loop works with once the site is set up."""

    fed: FederationConfig
    paradigm: ClientParadigm
    trainer: LocalTrainer
    sync: SyncPath
    tuner: LinkTuner
    numel: int  # elements of one push
    clock: RunClock | None = None  # the federation's progress (training.lr_progress run_time), on rank 0


def private_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over a private state's names and bytes (logged on restore, so a rejoin can be checked)."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def set_up(cfg: ClientConfig, work: Path, ps: PSClient, ranks: Ranks, preload: threading.Thread) -> Site:
    """Everything before the first round (see the module docstring), on every rank."""
    # Data first: a bad data directory must fail before the one-time token is spent.
    tokenizer, data, held = _load_site_data(cfg, work)
    # Only rank 0 reads the checkpoint (on a multi-node site the file is on its node alone) and shares it.
    resumed = ranks.share_resume(CheckpointManager(work / "checkpoints").load_latest() if ranks.leader else None)
    # A site that ran slice-wise has a sharded checkpoint instead (every rank wrote its own shards).
    shard_meta = sharded_meta(work) if ranks.leader else None
    spec = _join_spec(cfg, work, tokenizer, _newest_declaration(resumed, shard_meta))
    fed, master = _preview_join(cfg, ps, ranks, spec, tokenizer)
    device = ranks.device(pick_device(cfg.device))
    checked = check_before_join(cfg, fed, tokenizer, data, device, held)
    log.info("event=settings_checked client=%s paradigm=%s device=%s", cfg.client_id, fed.paradigm.name, device)
    paradigm = checked.paradigm
    codecs = codec_policy(fed.codec.name).candidates
    route = sync_route(
        ranks.world,
        paradigm,
        codecs,
        ranks.bcast_flag(shard_meta is not None if ranks.leader else None),
        overlap=fed.training.overlap_sync,
        kept_off=overlap_kept_off(fed.aggregation),
    )
    if fed.training.torch_threads:
        torch.set_num_threads(fed.training.torch_threads)
    # The model (its code's import included) is built while rank 0 joins and the first global model streams in.
    building = in_thread(lambda: _build(paradigm, fed, route.path, ranks, master, preload), "geofed-build")
    bootstrap = _join(ps, ranks, spec, fed, resumed)
    # The error-feedback residual needs only the checkpoint: restore it now, beside the model build.
    restoring = start_restore(resumed, fed, cfg.client_id, ranks.leader)
    paradigm.bind_ps(ps)
    if ranks.leader:
        log.info(
            "event=sync_path client=%s slice_wise=%s ranks=%d reason=%r",
            cfg.client_id,
            route.slice_wise,
            ranks.world,
            route.reason,
        )
    model = building.result()
    if bootstrap and not master:  # the preview did not foresee seeding Θ0: an initialised model is needed
        model = _build(paradigm, fed, route.path, ranks, True, preload)
    _check_layout(ps, paradigm, model, ranks)
    if ranks.leader:  # before sharding: the digest is over whole tensors
        _declare_build(ps, fed, paradigm, model, work / BUILD_CACHE)
    _restore_private(cfg, paradigm, model, resumed)  # before sharding: full tensors here
    if ranks.distributed:
        model = shard_model(model, checked.precision)  # only this rank's shards are allocated on the device
    trainer, clock = _start_trainer(cfg, ps, ranks, fed, checked, model, device)
    manifest = paradigm.manifest(model)
    numel = paradigm.payload_numel(sum(t.numel for t in manifest))
    tuner = LinkTuner(fed, ps.link, numel, cfg.client_id)
    ctx = SyncContext(ps, ranks, fed, paradigm, tuner, cfg.client_id, work, tuple(manifest), numel)
    sync = route.path(ctx, restoring)
    resumed = sync.restore(trainer, resumed, shard_meta is not None)
    if bootstrap:
        sync.bootstrap(model, resumed)
    resumed = None  # drop the mmap of the old file: the next save replaces it, and its space should go
    sync.resend()
    return Site(fed, paradigm, trainer, sync, tuner, numel, clock)


def _load_site_data(cfg: ClientConfig, work: Path) -> tuple[Tokenizer, TrainingData, TrainingData | None]:
    """The site's tokenizer, its training data and the data held out for evaluation (None without
    `eval_data`: then the tail of the training data), tokenised once into caches under `work`."""
    tokenizer = load_tokenizer(cfg.tokenizer)
    data, report = load_data(_data_source(cfg.data), tokenizer, cache=work / "tokens.npy")
    held = None
    if cfg.eval_data:  # held out instead of the tail of `data`
        held, _ = load_data(_data_source(cfg.eval_data), tokenizer, cache=work / "eval-tokens.npy")
    log.info("event=data_loaded files=%d tokens=%d examples=%d", report.files, report.tokens, report.examples)
    return tokenizer, data, held


def _join_spec(cfg: ClientConfig, work: Path, tokenizer: Tokenizer, declared: tuple[str, list] | None) -> JoinSpec:
    """What the site declares at Join: the paradigm and layout it ran (`declared`, from its checkpoint) and the
    model it last built, so a federation that changed refuses it (at the preview too), and its tokenizer."""
    built = _cached_build(work / BUILD_CACHE) if declared else ("", "")
    return JoinSpec(
        paradigm=declared[0] if declared else "",
        manifest=tuple(TensorEntry(n, tuple(s), d) for n, s, d in declared[1]) if declared else (),
        group=cfg.group or "",
        decoders=_downlink_decoders,
        paradigm_json=built[0],
        frozen_digest=built[1],
        tokenizer=tokenizer.name,
        tokenizer_sha256=tokenizer.sha256,
    )


def _preview_join(
    cfg: ClientConfig, ps: PSClient, ranks: Ranks, spec: JoinSpec, tokenizer: Tokenizer
) -> tuple[FederationConfig, bool]:
    """Rank 0 previews the Join and checks the federation's tokenizer is the site's; every rank gets the
    federation's settings and whether the preview foresees this site seeding Θ0 (the master, at version 0)."""

    def preview() -> tuple[str, bool]:
        answer = ps.preview(spec)  # the token is checked, not spent
        check_identity(tokenizer, answer.tokenizer, answer.tokenizer_sha256, given=cfg.tokenizer is not None)
        return answer.federation_json, answer.master and answer.version == 0

    # Rank 0 talks to the PS while the other ranks wait in short polls (`Ranks.lead`): a slow PS cannot time them out.
    fed_json, master = ranks.lead(preview) or (None, False)
    fed = FederationConfig.model_validate_json(ranks.bcast_text(fed_json))
    return fed, ranks.bcast_flag(master)


def _join(ps: PSClient, ranks: Ranks, spec: JoinSpec, fed: FederationConfig, resumed: ClientCheckpoint | None) -> bool:
    """Rank 0 joins (JoinError when the federation changed since the preview) and, unless it bootstraps Θ0,
    starts fetching the global model while the model is being built; every rank learns whether it bootstraps."""

    def join() -> tuple[str, bool]:
        if ps.session is None:  # a PS without previews joined us already
            ps.join(spec)
        joined = ps.federation.model_dump_json()
        if ps.federation != fed:
            raise JoinError("the federation's settings changed between the Join preview and the Join: relaunch")
        bootstrap = ps.master and ps.join_version == 0
        if not bootstrap:
            if resumed is not None:
                _hold_base(ps, resumed)
            ps.start()  # fetch the global model while the model is being built
        return joined, bootstrap

    _, bootstrap = ranks.lead(join) or (None, False)
    return ranks.bcast_flag(bootstrap)


def _restore_private(
    cfg: ClientConfig, paradigm: ClientParadigm, model: torch.nn.Module, resumed: ClientCheckpoint | None
) -> None:
    """Load the checkpoint's private state (what the site keeps and never sends) into `model`, if it has one."""
    if resumed is not None and resumed.private:
        paradigm.load_private_state(model, resumed.private)
        log.info(
            "event=private_restored client=%s tensors=%d sha256=%s",
            cfg.client_id,
            len(resumed.private),
            private_digest(resumed.private),
        )


def _start_trainer(
    cfg: ClientConfig,
    ps: PSClient,
    ranks: Ranks,
    fed: FederationConfig,
    checked: Checked,
    model: torch.nn.Module,
    device: torch.device,
) -> tuple[LocalTrainer, RunClock | None]:
    """The local trainer of `model`, and on rank 0 the federation's clock when the learning rate follows the run's
    time (`training.lr_progress`)."""
    trainer = LocalTrainer(
        model,
        fed.training,
        checked.stream,
        device,
        precision=checked.precision,
        slowdown=cfg.slowdown,
        rank=ranks.rank,
        world=ranks.world,
        micro_batch_size=cfg.micro_batch_size or None,
    )
    log.info(
        "event=trainer_ready client=%s device=%s precision=%s micro_batch=%d micro_steps=%d",
        cfg.client_id,
        device,
        trainer.precision.name,
        trainer.micro_batch_size,
        len(trainer.plan),
    )
    clock = None
    if fed.training.lr_progress == "run_time" and ranks.leader:
        clock = RunClock(fed.training.run_duration_s, lambda: ps.run_started_at)
        trainer.progress = clock
    return trainer, clock


def _build(
    paradigm: ClientParadigm,
    fed: FederationConfig,
    path: type[SyncPath],
    ranks: Ranks,
    initialise: bool,
    preload: threading.Thread,
) -> torch.nn.Module:
    """The model as the sync path needs it. Only the master's Θ0 needs a random init when everything is
    exchanged; a paradigm that keeps a frozen part builds it on every client (`shell_ok`)."""
    # The preload's imports end first: imports hold the interpreter lock, so side by side they gain nothing,
    # and transformers' lazy modules (a model that needs them) are not safe to import from two threads.
    preload.join()
    t0 = time.monotonic()
    if path.slices_only and ranks.distributed and not initialise and paradigm.shell_ok and not fed.model.path:
        # only this rank's shards are ever allocated
        model = paradigm.prepare(build_on_meta(fed.model, transformers_model=fed.paradigm.transformers_model))
    else:
        model = paradigm.prepare(paradigm.build(fed, initialise=initialise))
    log.info("event=model_built initialised=%s seconds=%.2f", initialise, time.monotonic() - t0)
    return model


def _check_layout(ps: PSClient, paradigm: ClientParadigm, model: torch.nn.Module, ranks: Ranks) -> None:
    """The PS announced its layout at Join: a model that exchanges something else must stop here, clearly."""
    if not ranks.leader or not ps.manifest:
        return
    try:
        check_manifest(model, ps.manifest, paradigm.exchanged)
    except ManifestMismatch as exc:
        raise ManifestMismatch(f"paradigm {paradigm.name!r}: {exc}") from None


def _declare_build(
    ps: PSClient, fed: FederationConfig, paradigm: ClientParadigm, model: torch.nn.Module, cache: Path
) -> None:
    """Tell the PS what this model was built under and the digest of its frozen part (JoinError when the
    federation's differs), and keep both for the next launch's Join."""
    settings, digest = fed.paradigm.model_dump_json(), paradigm.frozen_digest(model)
    if not digest:
        return
    ps.declare_build(settings, digest)
    cache.write_text(json.dumps({"paradigm": settings, "frozen_digest": digest}))
    log.info("event=frozen_digest paradigm=%s sha256=%s", paradigm.name, digest)


def _cached_build(path: Path) -> tuple[str, str]:
    """(paradigm settings JSON, frozen digest) of the model the last launch built; empty when unknown."""
    try:
        saved = json.loads(path.read_text())
        return str(saved["paradigm"]), str(saved["frozen_digest"])
    except (OSError, ValueError, KeyError, TypeError):
        return "", ""


def _newest_declaration(resumed: ClientCheckpoint | None, meta: dict | None) -> tuple[str, list] | None:
    """(paradigm, manifest) of the newer of the two checkpoints a site may have, declared at Join."""
    if meta is not None and (resumed is None or meta["step"] >= resumed.step):
        return meta["paradigm"], meta["manifest"]
    return (resumed.paradigm, resumed.manifest) if resumed is not None else None


def _downlink_decoders(fed: FederationConfig) -> dict:
    """A paradigm may stream its own encoding (zo: one scalar per seed); the stream thread decodes it."""
    return client_paradigm(fed.paradigm).downlink_decoders()


def _hold_base(ps: PSClient, resumed: ClientCheckpoint) -> None:
    """Offer the PS client the exact global model the checkpointed round started from (see `PSClient.hold`)."""
    base = resumed.base_model
    if base is None or not base.numel():
        return
    kept = GlobalVersion(resumed.base_version, base.numpy(), ps.manifest, instance=resumed.base_instance)
    log.info("event=model_held version=%d use=%s", kept.version, ps.hold(kept))


def _data_source(data: str):
    """A directory, or a `.list` file naming one file per line (how `geofed local` splits a corpus)."""
    p = Path(data)
    if p.suffix == ".list":
        return read_file_list(p)
    return p
