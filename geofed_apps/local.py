"""`geofed local`: one PS and N client processes on 127.0.0.1 — the embedded default.

Everything is real: processes, sockets, one-time tokens, the master's bootstrap, compressed deltas.
The corpus is the Python standard library's own sources, split non-IID across clients by module.
Heavy imports (torch, matplotlib) stay inside the functions, so `geofed --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from geofed.checkpoint_shape import fill_checkpoint_shape
from geofed.cli_flags import SettingsError, apply_overrides, load_settings_file, validate_settings
from geofed.config import FederationConfig
from geofed.tokenizer_identity import BYTE
from geofed_apps.wan import LinkProfile

from .chaos import NO_CHAOS, NOT_JOINED, ChaosSpec, ChaosSpecError, check_spec, joining, parse_spec
from .deferred_eval import DeferredEvaluation
from .links import ClientLinks
from .local_settings import LOCAL_DEFAULTS, fill_run_duration, merge_settings
from .privacy_watch import PrivacyWatch, stopped_by_budget
from .run_dir import new_run_dir
from .user_data import check_user_data

if TYPE_CHECKING:
    import subprocess

    from ps_server.checkpoint import PSCheckpoint

    from .evaluate import GlobalEvaluator
    from .split_local import SplitLocal


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register `geofed local` on the top-level CLI (see `geofed_apps.cli`)."""
    local = sub.add_parser(
        "local",
        help="run a whole federation on this machine (the embedded default)",
        description="Start a PS and N clients on 127.0.0.1 and train a small GPT-2-style model "
        "on the Python standard library's sources, split by module across clients.",
    )
    _add_run_flags(local)
    _add_scenario_flags(local)
    local.set_defaults(func=run_local)


def _add_run_flags(local: argparse.ArgumentParser) -> None:
    """The run's clients, data, length, directory and settings, and how much it says."""
    local.add_argument("--clients", type=int, default=3, help="number of client processes (default 3)")
    local.add_argument(
        "--data",
        help="train on this directory of text/JSONL files instead (split across clients); "
        "with --paradigm, on its prompt/completion pairs, scored on held-out ones",
    )
    local.add_argument(
        "--eval-data",
        metavar="DIR",
        help="with --data: hold out this directory's files for the score instead of a seeded "
        "training.eval_fraction of --data (with --paradigm) or a share of its files",
    )
    local.add_argument("--duration", type=float, default=100.0, help="seconds of training (default 100)")
    local.add_argument("--run-dir", default="runs", help="parent folder of the run directory (default ./runs)")
    local.add_argument(
        "--slow-client",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="slow the last client down by FACTOR to show heterogeneity (default 1 = off)",
    )
    local.add_argument("--federation", help="federation settings file overriding the local defaults")
    local.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a federation setting")
    local.add_argument("--quiet", action="store_true", help="only the summary lines")


def _add_scenario_flags(local: argparse.ArgumentParser) -> None:
    """What the run stands for: PS groups or shards, a fine-tuning paradigm and its task, WAN links, the
    tokenizer, the seed and injected faults."""
    local.add_argument(
        "--ps-groups",
        type=int,
        default=1,
        metavar="N",
        help="N PS groups combined by ring all-reduce (multi-PS), clients split across them",
    )
    local.add_argument(
        "--ps-shards",
        type=int,
        default=1,
        metavar="N",
        help="run the PS as a front plus N shard processes, each holding a slice of the model",
    )
    local.add_argument(
        "--paradigm",
        metavar="NAME",
        help="fine-tune the cached base model with this paradigm's preset (lora, hybrid-lora, ravan, "
        "ravan-matched, zo, zo-lora, bitfit, pretrain) on the docstring-parameters QA task, or on "
        "--data's pairs; ends with exact match and F1",
    )
    local.add_argument(
        "--link",
        metavar="PROFILE",
        help="each client dials the PS through its own emulated WAN link, 'LAT[/JITTER[/RATE | "
        "/UP/DOWN]][,kind@at[+dur]...]' as `geofed wan` reads it ('0ms' shapes nothing); the "
        "summary gives the bytes each round put on the link, counted at the socket",
    )
    local.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="every client tokenises with this local Hugging Face tokenizer directory (the same as "
        "--set model.tokenizer=DIR; default: the built-in byte tokenizer)",
    )
    local.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the clients' data order and, with --paradigm, of which modules go to which client",
    )
    local.add_argument(
        "--renamings",
        type=int,
        default=0,
        metavar="N",
        help="with --paradigm: each client also trains on N copies of each of its pairs with the "
        "parameters renamed to other words of its own docstrings (default 0)",
    )
    local.add_argument(
        "--task",
        default="docstring-params",
        choices=("docstring-params", "stdlib-package"),
        help="with --paradigm: the task, docstring-params (default) or stdlib-package (which stdlib "
        "package a docstring is from; 1,200 held-out pairs)",
    )
    local.add_argument(
        "--chaos",
        metavar="SPEC",
        help="inject a seeded (--seed) schedule of faults, e.g. 'preempt=60,kill=0,flap=90,"
        "ps-restart=1,join=1,leave=1': mean seconds between preemptions, kills and --link flaps per client; "
        "PS restarts, sites joining mid-run and sites leaving for good in the run (docs/reliability.md, "
        "Chaos mode)",
    )


@dataclass
class LocalOptions:
    clients: int = 3
    data: str | None = None
    eval_data: str | None = None  # held-out files for the score, instead of a share of `data`
    duration_s: float = 100.0
    run_dir: str = "runs"
    slow_client: float = 1.0
    federation_file: str | None = None
    overrides: list[str] = field(default_factory=list)
    quiet: bool = False
    ps_groups: int = 1  # PS groups (multi-PS, ring all-reduce); clients round-robin across them
    ps_shards: int = 1  # a sharded PS: front + N shard processes
    paradigm: str | None = None  # a fine-tuning preset (geofed_apps.finetune.preset)
    seed: int = 0  # client i's data-order seed is 1000 * seed + i; the fine-tuning split's seed
    link: LinkProfile | None = None  # each client behind its own emulated WAN link (geofed_apps.links)
    renamings: int = 0  # with `paradigm`: renamed copies of each training pair (geofed_apps.finetune.task)
    chaos: ChaosSpec | None = None  # a seeded fault schedule (geofed_apps.chaos)


_PARADIGM_BYTES = (
    "--paradigm without --data fine-tunes the built-in byte-level base on the docstring task: tokenizer "
    "{tokenizer!r} needs your own pairs (--data) and a base that embeds it (--set model.path=DIR)"
)


def run_local(args: argparse.Namespace) -> int:
    if args.clients < 1 or args.clients > 16:
        return _fail("--clients must be between 1 and 16")
    if not 1 <= args.ps_groups <= args.clients:
        return _fail("--ps-groups must be between 1 and --clients (every group needs a client)")
    if args.renamings < 0:
        return _fail(f"--renamings must be 0 or more, got {args.renamings}")
    if args.paradigm and args.tokenizer and not args.data:
        return _fail(_PARADIGM_BYTES.format(tokenizer=args.tokenizer))
    if args.renamings and not args.paradigm:
        return _fail("--renamings needs --paradigm: it adds copies of the fine-tuning task's pairs")
    if args.eval_data and not args.data:
        return _fail("--eval-data needs --data: it holds out files instead of a share of --data")
    if args.renamings and args.data:
        return _fail("--renamings renames the docstring task's parameters; it does not apply to --data")
    if args.task != "docstring-params":
        if not args.paradigm or args.data or args.renamings:
            return _fail(f"--task {args.task} needs --paradigm and brings its own pairs (no --data, --renamings)")
        from .finetune.package_task import task_dirs

        args.data, args.eval_data = (str(p) for p in task_dirs(args.seed))
    try:
        link = LinkProfile.parse(args.link) if args.link else None
    except ValueError as exc:
        return _fail(f"--link: {exc}")
    try:
        chaos = parse_spec(args.chaos) if args.chaos is not None else None
    except ChaosSpecError as exc:
        return _fail(f"--chaos: {exc}")
    if chaos is not None and (
        why := check_spec(chaos, link=link is not None, single_ps=args.ps_groups == 1 and args.ps_shards == 1,
                          clients=args.clients)
    ):
        return _fail(why)
    overrides = [
        *(args.set or []),
        *([f"model.tokenizer={Path(args.tokenizer).expanduser().resolve()}"] if args.tokenizer else []),
    ]
    opts = LocalOptions(
        clients=args.clients,
        data=args.data,
        eval_data=args.eval_data,
        duration_s=args.duration,
        run_dir=args.run_dir,
        slow_client=args.slow_client,
        federation_file=args.federation,
        overrides=overrides,
        quiet=args.quiet,
        ps_groups=args.ps_groups,
        paradigm=args.paradigm,
        ps_shards=args.ps_shards,
        seed=args.seed,
        link=link,
        renamings=args.renamings,
        chaos=chaos,
    )
    return run_local_federation(opts)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _fail(msg: str) -> int:
    print(f"geofed local: {msg}", file=sys.stderr, flush=True)
    return 2


def _codec_text(fed: FederationConfig) -> str:
    """The banner's codec: e.g. "int8+huffman", or "sparse 2% 2-bit" (the sparse mode has no entropy stage)."""
    c = fed.codec
    if c.delta_form == "sparse":
        return f"sparse {100 * c.sparse_density:g}% {c.sparse_value_bits}-bit"
    return f"{c.name}+{c.entropy}"


def _model_text(fed: FederationConfig) -> str:
    """The banner's model as loaded: e.g. "llama 3x192, vocab 2000, tokenizer /data/bpe (checkpoint /data/llama)"."""
    m = fed.model
    source = f" (checkpoint {m.path})" if m.path else ""
    return f"{m.family} {m.n_layer}x{m.n_embd}, vocab {m.vocab_size}, tokenizer {m.tokenizer}{source}"


def _write_lists(run: Path, opts: LocalOptions) -> tuple[list[Path], list[Path]]:
    """Per-client `.list` files and the held-out evaluation files (also written as `eval.list`)."""
    from client_agent.data.corpus import CorpusError, CorpusSplit, split_directory, stdlib_split, write_split
    from client_agent.data.files import collect_files

    if opts.data and opts.eval_data:
        clients = split_directory(opts.data, opts.clients)
        if any(not g for g in clients):
            raise CorpusError(f"{opts.data} has too few top-level entries to split across {opts.clients} clients")
        split = CorpusSplit(clients=tuple(tuple(g) for g in clients), eval=tuple(collect_files(opts.eval_data)))
    elif opts.data:
        groups = split_directory(opts.data, opts.clients + 1)
        if any(not g for g in groups):
            raise CorpusError(
                f"{opts.data} has too few top-level entries to split across {opts.clients} clients "
                "and a held-out evaluation set"
            )
        split = CorpusSplit(clients=tuple(tuple(g) for g in groups[:-1]), eval=tuple(groups[-1]))
    else:
        split = stdlib_split(opts.clients)
    return write_split(split, run / "data"), list(split.eval)


class _Tail:
    """Follow a client's metrics.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos = path, 0

    def new(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path) as f:
            f.seek(self.pos)
            lines = f.readlines()
            if lines and not lines[-1].endswith("\n"):
                lines = lines[:-1]
            self.pos += sum(len(line) for line in lines)
        return [json.loads(line) for line in lines]


def run_local_federation(opts: LocalOptions) -> int:
    """Run the whole federation; print progress, `eval loss: A -> B` and the run directory."""
    from client_agent.data.corpus import CorpusError
    from client_agent.data.files import DataError
    from client_agent.data.tokenizer import TokenizerError
    from geofed.paradigms import import_half

    try:
        split, fed = _federation(opts)
    except (SettingsError, KeyError) as exc:
        return _fail(str(exc).strip("'\""))
    if (refusal := _tokenizer_refusal(opts, fed)) is not None:
        return _fail(refusal)
    # A paradigm's own task (`ParadigmSettings.local_task`) writes and scores its data, the user's too.
    own_task = import_half(fed.paradigm.local_task) if opts.paradigm and fed.paradigm.local_task else None
    try:  # the user's data is read and checked whole before anything starts
        users = (
            own_task.read_user(opts.data, opts.eval_data, fed, opts.clients, opts.seed)
            if own_task is not None and opts.data
            else check_user_data(
                opts.data, opts.eval_data, fed, opts.clients, opts.seed, pairs=bool(opts.paradigm) and split is None
            )
        )
    except (DataError, CorpusError, TokenizerError) as exc:
        return _fail(str(exc))
    run = new_run_dir(opts.run_dir)
    try:
        task, lists, held = _write_data(run, opts, fed, split, own_task, users)
    except CorpusError as exc:
        return _fail(str(exc))
    before = task.score_base(fed) if task is not None else None
    (run / "federation.yaml").write_text(yaml.safe_dump(fed.model_dump(mode="json"), sort_keys=False))
    _say(
        f"geofed local: {opts.clients} clients, model {_model_text(fed)}, "
        f"{fed.aggregation.mode} {fed.aggregation.outer_optimizer}, codec {_codec_text(fed)}, "
        f"{opts.duration_s:.0f}s; run directory {run}"
    )
    for line in users.lines() if users is not None else ():
        _say(line)
    return _LocalRun(opts, fed, run, split, lists, held).run(task, before)


def _federation(opts: LocalOptions) -> tuple[SplitLocal | None, FederationConfig]:
    """The run's settings (the local defaults, the paradigm's preset, --federation, then --set), validated, and
    the split trainer when the paradigm needs one (a trainer process beside the PS)."""
    from geofed.paradigms import paradigms_with

    from .split_local import SplitLocal

    split = SplitLocal() if opts.paradigm in paradigms_with("needs_trainer") else None  # a trainer process too
    preset = split.settings() if split else _finetune_preset(opts.paradigm) if opts.paradigm else {}
    data = apply_overrides(
        merge_settings(merge_settings(LOCAL_DEFAULTS, preset), load_settings_file(opts.federation_file)), opts.overrides
    )
    if opts.paradigm and split is None:
        from .finetune.preset import with_base_targets

        data = with_base_targets(data, preset["model"]["path"])
    if opts.ps_shards > 1:
        data["ps_shards"] = opts.ps_shards
    fill_run_duration(data, opts.duration_s)
    return split, validate_settings(FederationConfig, fill_checkpoint_shape(data))


def _tokenizer_refusal(opts: LocalOptions, fed: FederationConfig) -> str | None:
    """Why the federation's tokenizer cannot run, said once before anything starts (every client would refuse it
    at its preflight); None when it can."""
    if opts.paradigm and not opts.data and fed.model.tokenizer != BYTE:
        return _PARADIGM_BYTES.format(tokenizer=fed.model.tokenizer)
    if fed.model.tokenizer != BYTE:
        from client_agent.data.tokenizer import TokenizerError, check_vocab, load_tokenizer

        try:
            check_vocab(load_tokenizer(fed.model.tokenizer), fed.model.vocab_size)
        except TokenizerError as exc:
            return str(exc)
    return None


def _write_data(
    run: Path, opts: LocalOptions, fed: FederationConfig, split: SplitLocal | None, own_task: Any, users: Any
) -> tuple[Any, list[Path], list[Path]]:
    """Write each client's data under `run`: the user's pairs, a fine-tuning task's or the corpus's split. The
    task that scores the run (None for the corpus), the clients' files and the held-out evaluation files."""
    if users is not None:
        from .finetune.user_task import UserTask

        task = own_task.write_user(run / "data", users) if own_task else UserTask.write(run / "data", users, fed)
        return task, task.client_files, [task.eval_file]
    if opts.paradigm and split is None:
        from .finetune.preset import FinetuneTask

        task = (own_task or FinetuneTask).write(run / "data", opts.clients, opts.seed, renamings=opts.renamings)
        return task, task.client_files, [task.eval_file]
    lists, held = _write_lists(run, opts)
    return None, lists, held


class _LocalRun:
    """One federation on this machine once its data is written: start the PSs and the clients, watch them until
    the clients exit, then evaluate, export and sum the run up. `run` stops every process it started."""

    def __init__(
        self,
        opts: LocalOptions,
        fed: FederationConfig,
        run: Path,
        split: SplitLocal | None,
        lists: list[Path],
        held: list[Path],
    ) -> None:
        from .groups import LocalPSSet

        self.opts, self.fed, self.run_dir, self.split, self.lists, self.held = opts, fed, run, split, lists, held
        self.logs = run / "logs"
        self.ps_set = LocalPSSet(run, run / "federation.yaml", self.logs, opts.ps_groups, opts.ps_shards)
        self.ps = self.ps_set.primary
        if split is not None:
            split.attach(run)
            self.ps.extra += split.ps_flags()
        self.clients: list[subprocess.Popen] = []
        self.links = ClientLinks(opts.link) if opts.link is not None else None
        self.addresses: list[str] = []  # the address client i dials: its PS's, or its link's in front of it
        self.t0 = time.monotonic()

    def run(self, task: Any, before: Any) -> int:
        """Run it to the end: 0, 1 when a client failed, 130 after a Ctrl-C, 2 when nothing could be trained.
        Every process it started is stopped on the way out."""
        try:
            return self._train_and_report(task, before)
        except KeyboardInterrupt:
            return 130
        finally:
            self._stop()

    def _train_and_report(self, task: Any, before: Any) -> int:
        """Start the PSs and the clients, watch them until they exit, then evaluate, export and say the results."""
        if (code := self._start_servers()) is not None:
            return code
        admin = self.ps.admin()
        if (code := self._start_split_trainer()) is not None:
            return code
        tails = self._launch_clients(joining(self.opts.chaos, len(self.lists), self.opts.seed) if self.opts.chaos
                                     else ())
        chaos = (
            NO_CHAOS
            if self.opts.chaos is None
            else _chaos_runner(self.opts, self.clients, self._launch, self.links, self.ps, self.run_dir)
        )
        evaluation = self._evaluation()
        t_watch = time.time()
        privacy = PrivacyWatch(admin, _say) if self.fed.privacy.enabled else None
        records, interrupted = self._watch_clients(tails, admin, evaluation, privacy, chaos)
        evaluator, initial = evaluation.result()
        records.insert(0, {"t": t_watch, "event": "global_eval", "version": 1, "eval_loss": initial, "elapsed_s": 0.0})
        traffic = _traffic(admin) if not interrupted else None  # the PS may be stopping: Ctrl-C reached it too
        goodput = _goodput(admin) if not interrupted else None
        admin.close()
        rings = self.ps_set.ring_summary()
        failed = [i for i in self._failed_clients(interrupted, privacy) if i not in chaos.left]
        for one in self.ps_set.all:
            one.terminate()
        ckpt = self.ps_set.newest()
        if ckpt is None:
            return _fail(f"no global model was produced; see {self.logs}")
        final = (
            evaluator.loss(ckpt.flat) if self.split is None else self.split.full_loss(evaluator, self.fed, ckpt.flat)
        )
        records.append(
            {
                "t": time.time(),
                "event": "global_eval",
                "version": ckpt.version,
                "eval_loss": final,
                "elapsed_s": time.monotonic() - self.t0,
            }
        )
        _write_outputs(self.run_dir, records, evaluator, ckpt, self.fed)
        self._report_failures(failed)
        self._say_totals(ckpt, records, interrupted)
        if chaos.enabled:
            _say(chaos.summary())
        self._say_scores(task, before, ckpt, initial, final)
        self._say_closing(task, records, goodput, traffic, rings)
        return 130 if interrupted else 0 if not failed else 1

    def _stop(self) -> None:
        """Stop every process this run started (the PSs, the clients, the split trainer) and the links."""
        from .launch import stop_all

        stop_all([p for p in (*self.ps_set.procs, *self.started(), self.split.proc if self.split else None)
                  if p is not None])
        if self.links is not None:
            self.links.stop()

    def _start_servers(self) -> int | None:
        """Start every PS and say where each is and how to ask its status; the exit code when one did not start."""
        from .launch import StartError

        try:
            self.ps_set.start()
        except StartError as exc:
            return _fail(f"a parameter server did not start: {str(exc).splitlines()[0]}; see {self.logs}")
        except TimeoutError:
            return _fail("the parameter server did not start within 60 s")
        for one in self.ps_set.all:
            if one.status_url:
                _say(f"status page: {one.status_url} (live while this runs)")
        for one in self.ps_set.all if self.ps_set.sharded is None else [self.ps]:  # the PSs clients dial
            _say(
                f"parameter server: {one.address}; its status: "
                f"geofed status --ps {one.address} --insecure --admin-token-file {one.admin_file}"
            )
        return None

    def _start_split_trainer(self) -> int | None:
        """Start the paradigm's trainer process, if it has one; the exit code when it did not start."""
        from .launch import StartError

        if self.split is None:
            return None
        try:
            self.split.start(self.run_dir / "federation.yaml", self.ps.address, self.logs / "split-trainer.log")
        except (StartError, TimeoutError) as exc:
            return _fail(f"{exc}; see {self.logs / 'split-trainer.log'}")
        return None

    def _launch(self, i: int, duration_s: float) -> subprocess.Popen:
        """Start client i with a fresh one-time token, client 0's a master's (a relaunch too, as the operator
        mints one per attempt; it only builds Θ0 if there is none), resuming from its work directory."""
        from .launch import start_client

        client_id = f"local.client-{i}"
        client_ps, client_extra = self.ps_set.for_client(i)
        with client_ps.admin() as client_admin:
            # One site per client: each stands for one institution (the PS counts sites, not client ids).
            token, _ = client_admin.create_token(client_id, site=f"local-{i}", ttl_s=600, master=(i == 0))
        slow = self.opts.slow_client if i == len(self.lists) - 1 else 1.0
        run, fed = self.run_dir, self.fed
        return start_client(
            token, run / "tokens" / f"client-{i}", self.logs / f"client-{i}.log", ps=self.addresses[i],
            client_id=client_id, data=self.lists[i], work_dir=run / "clients" / f"client-{i}", duration_s=duration_s,
            seed=1000 * self.opts.seed + i, slowdown=slow, **client_extra,
            **({"tokenizer": fed.model.tokenizer} if fed.model.tokenizer != BYTE else {}),
        )  # fmt: skip

    def started(self) -> list[subprocess.Popen]:
        """The client processes started so far (not the slots of sites that join later)."""
        return [p for p in self.clients if p is not NOT_JOINED]

    def _launch_clients(self, late: tuple[int, ...] = ()) -> list[_Tail]:
        """Start every client but the `late` ones (sites that join mid-run: `NOT_JOINED` until the chaos runner
        starts them), each dialling its PS (through its own link with --link); a tail of each one's metrics."""
        tails = []
        for i in range(len(self.lists)):
            client_ps = self.ps_set.for_client(i)[0]
            self.addresses.append(
                self.links.address(f"local.client-{i}", client_ps.address)
                if self.links is not None
                else client_ps.address
            )
            self.clients.append(NOT_JOINED if i in late else self._launch(i, self.opts.duration_s))
            tails.append(_Tail(self.run_dir / "clients" / f"client-{i}" / "metrics.jsonl"))
        return tails

    def _evaluation(self) -> DeferredEvaluation:
        """The global evaluator on the held-out files, built beside the clients' start-up; it says the initial
        loss once known."""
        from .evaluate import GlobalEvaluator

        fed, held, split = self.fed, self.held, self.split
        return DeferredEvaluation(
            lambda: GlobalEvaluator(fed, held, self.run_dir / "eval-tokens.npy"),
            (lambda ev: ev.loss()) if split is None else (lambda ev: split.full_loss(ev, fed)),
            [(p, self.logs / f"client-{i}.log") for i, p in enumerate(self.clients) if p is not NOT_JOINED],
            lambda loss: _say(f"initial global eval loss {loss:.3f} (held-out modules: {len(held)} files)"),
        )

    def _watch_clients(
        self, tails: list[_Tail], admin: Any, evaluation: DeferredEvaluation, privacy: PrivacyWatch | None, chaos: Any
    ) -> tuple[list[dict], bool]:
        """Live progress until every client has exited (`_watch`): the records, and whether a Ctrl-C cut it short
        (it stops the clients, but keeps and exports what was trained)."""
        from .launch import stop_all

        records: list[dict] = []
        try:
            _watch(
                records,
                self.clients,
                tails,
                admin,
                self.opts,
                self.ps_set.newest,
                evaluation,
                self.t0,
                privacy,
                self.links,
                chaos,
            )
        except KeyboardInterrupt:
            _say(
                "interrupted: stopping the clients; the parameter server saves the global model "
                "(Ctrl-C again to quit without it)"
            )
            stop_all(self.started())
            for tail in tails:
                records.extend({**rec, "elapsed_s": time.monotonic() - self.t0} for rec in tail.new())
            return records, True
        return records, False

    def _failed_clients(self, interrupted: bool, privacy: PrivacyWatch | None) -> list[int]:
        """The clients that exited with an error, not counting those the PS stopped at the privacy budget (said
        here when it was spent); none after a Ctrl-C."""
        failed = [i for i, p in enumerate(self.clients) if p.returncode not in (0, None) and not interrupted]
        if privacy is not None and privacy.spent:  # the PS refused their deltas at the budget: the intended stop
            failed = [i for i in failed if not stopped_by_budget(self.logs / f"client-{i}.log")]
            _say(
                f"privacy budget spent at global v{privacy.last['version']}: ε {privacy.last['privacy_epsilon']:.4g} "
                f"of {privacy.last['privacy_budget']:g} at δ {privacy.last['privacy_delta']:g}; the PS published no "
                "further version"
            )
        return failed

    def _report_failures(self, failed: list[int]) -> None:
        """Say which clients exited with an error, and how each ended with its log's last lines."""
        if failed:
            _say(f"warning: client(s) {failed} exited with an error; see {self.logs}")
            for i in failed:
                _say(_exit_report(i, self.clients[i].returncode, self.logs / f"client-{i}.log"))

    def _say_totals(self, ckpt: PSCheckpoint, records: list[dict], interrupted: bool) -> None:
        """The global version reached and the megabytes the clients pushed (and when a Ctrl-C stopped the run)."""
        pushed = sum(r.get("payload_bytes", 0) for r in records) / 1e6
        cut = ""
        if interrupted:
            cut = f" (interrupted after {time.monotonic() - self.t0:.0f} s; final_model/ holds this version)"
        _say(f"global version {ckpt.version}, {pushed:.2f} MB pushed{cut}")

    def _say_scores(self, task: Any, before: Any, ckpt: PSCheckpoint, initial: float, final: float) -> None:
        """The task's scores before and after (a fine-tuning task's, the user's pairs'), else the eval loss."""
        if task is None:
            _say(f"eval loss: {initial:.2f} -> {final:.2f}")
            return
        from .finetune.preset import summary_lines

        clients = [self.run_dir / "clients" / f"client-{i}" for i in range(len(self.lists))]
        after = task.score_global(self.fed, ckpt.flat, clients)
        own_lines = hasattr(task, "summary_lines")  # the user's pairs, or a paradigm's own task
        for line in task.summary_lines(before, after) if own_lines else summary_lines(before, after, self.fed):
            _say(line)

    def _say_closing(
        self, task: Any, records: list[dict], goodput: str | None, traffic: str | None, rings: str | None
    ) -> None:
        """The closing lines: goodput, the split trainer's memory, traffic, the links', the rings', the run dir."""
        if goodput is not None:
            _say(goodput)
        if task is None and self.split is not None:
            _say(self.split.memory_line(self.logs))
        if traffic is not None:
            _say(traffic)
        if self.links is not None:
            _say(self.links.summary(records))
        if rings:
            _say(rings)
        _say(f"run directory: {self.run_dir}")


def _chaos_runner(opts: LocalOptions, clients: list, launch, links: ClientLinks | None, ps, run: Path):
    """The `--chaos` schedule's runner, acting on `clients` (relaunched with `launch`), their links and the PS."""
    from .chaos import ChaosRunner, build_schedule

    def restart_ps() -> None:
        ps.terminate()
        ps.start()

    ids = [f"local.client-{i}" for i in range(len(clients))]
    schedule = build_schedule(opts.chaos, len(clients), opts.duration_s, opts.seed)
    _say(
        f"chaos: {len(schedule)} faults scheduled (seed {opts.seed}); each is logged as event=chaos, "
        f"also in {run / 'logs' / 'chaos.log'}"
    )
    # Fault times count from the clients' launch, as their own duration does.
    return ChaosRunner(
        schedule,
        opts.duration_s,
        clients,
        ids,
        relaunch=launch,
        blackhole=(lambda i, s: links.blackhole(ids[i], s)) if links is not None else None,
        restart_ps=restart_ps,
        say=_say,
        log=run / "logs" / "chaos.log",
    )


def _exit_report(i: int, code: int, log: Path, lines: int = 5) -> str:
    """`client-i exited with code N` (or the signal that ended it) and the last lines of its log."""
    how = f"code {code}"
    if code < 0:
        try:
            how = f"signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"signal {-code}"
    try:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        tail = [f"(its log cannot be read: {exc})"]
    return f"client-{i} exited with {how}; its log ends:\n" + "\n".join(f"    {line}" for line in tail)


def _traffic(admin) -> str:
    """`pushed X MB, pulled Y MB`: payload bytes the PS took from and streamed to all clients (its counters)."""
    try:
        clients = admin.list_clients()
    except Exception as exc:  # noqa: BLE001 - a summary line must not fail the run
        return f"pushed ? MB, pulled ? MB (PS counters unavailable: {exc})"
    pushed = sum(c["bytes_in"] for c in clients) / 1e6
    pulled = sum(c["bytes_out"] for c in clients) / 1e6
    return f"pushed {pushed:.2f} MB, pulled {pulled:.2f} MB"


def _goodput(admin) -> str:
    """`goodput: X% of trained tokens reached the global model`, from the PS's status (docs/reliability.md)."""
    try:
        status = admin.status()
    except Exception as exc:  # noqa: BLE001 - a summary line must not fail the run
        return f"goodput: ? (PS status unavailable: {exc})"
    return f"goodput: {100 * status['goodput']:.1f}% of trained tokens reached the global model"


def _finetune_preset(name: str) -> dict:
    """A fine-tuning preset's settings, with the cached base model (pretrained now on first use)."""
    from .finetune.base_model import ensure_base_model
    from .finetune.preset import preset_settings, presets

    if name not in (known := presets()):
        raise KeyError(f"--paradigm {name!r} has no preset; known: {', '.join(sorted(known))}")
    return preset_settings(name, ensure_base_model(say=_say))


def _watch(
    records: list[dict],
    clients,
    tails,
    admin,
    opts,
    latest,
    evaluation: DeferredEvaluation,
    t0: float,
    privacy: PrivacyWatch | None = None,
    links: ClientLinks | None = None,
    chaos=NO_CHAOS,
) -> list[dict]:
    """Live progress into `records` until every client has exited; periodic global evals (of `latest()`) for
    the plot, once the evaluator is built. A Ctrl-C leaves what was recorded until then in `records`."""
    last_eval = time.monotonic()
    t_chaos = time.monotonic()  # fault times count from here, when the clients were started
    while True:
        chaos.tick(time.monotonic() - t_chaos)
        if privacy is not None:
            records += privacy.poll(t0)
        for tail in tails:
            for rec in tail.new():
                rec["elapsed_s"] = time.monotonic() - t0
                records.append(links.annotate(rec) if links is not None else rec)
                if not opts.quiet:
                    _say(
                        f"  [{rec['elapsed_s']:5.0f}s] {rec['client']:<16} round {rec['round']:>3} "
                        f"step {rec['step']:>5} "
                        f"loss {rec['train_loss']:.3f}  {rec['tokens_per_s']:7.0f} tok/s  -> v{rec['version']:<4} "
                        f"{rec['payload_bytes'] / 1e3:7.1f} kB ({rec['ratio'] * 100:.1f}% of fp32, {rec['codec']})"
                    )
        evaluator = evaluation.ready()
        if evaluator is not None and time.monotonic() - last_eval > 10:
            last_eval = time.monotonic()
            ckpt = latest()
            if ckpt is not None:
                loss = evaluator.loss(ckpt.flat)
                records.append(
                    {
                        "t": time.time(),
                        "event": "global_eval",
                        "version": ckpt.version,
                        "eval_loss": loss,
                        "elapsed_s": time.monotonic() - t0,
                    }
                )
                try:
                    status = admin.status()
                    active = status["active_clients"]
                except Exception:  # progress display only; the PS may be busy
                    active = "?"
                _say(f"== global v{ckpt.version}: eval loss {loss:.3f}, {active} clients active")
        if all(p.poll() is not None for p in clients):
            for tail in tails:
                records.extend(links.annotate(r) if links is not None else r for r in tail.new())
            if privacy is not None:
                records += privacy.poll(t0)
            return records
        time.sleep(0.5)


def _write_outputs(
    run: Path, records: list[dict], evaluator: GlobalEvaluator, ckpt: PSCheckpoint, fed: FederationConfig
) -> None:
    """metrics.jsonl, the final global model as `geofed export` writes it (`final_model/`), loss-vs-time PNG."""
    from .export import ExportError, GlobalModel, export_global_model, federation_tokenizer

    with open(run / "metrics.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    try:
        export_global_model(
            GlobalModel(evaluator.paradigm, evaluator.model),
            ckpt,
            fed,
            run / "final_model",
            federation_tokenizer(fed.model.tokenizer, fed),
            tokenizer_name=fed.model.tokenizer,
        )
    except ExportError as exc:  # the run's other outputs still matter
        _say(f"warning: final_model/ not written: {exc}")
    _plot(run / "loss.png", records)


def _plot(path: Path, records: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    clients = sorted({r["client"] for r in records if "client" in r})
    for c in clients:
        pts = [(r["elapsed_s"], r["train_loss"]) for r in records if r.get("client") == c]
        ax.plot(*zip(*pts, strict=True), alpha=0.6, label=f"{c} train")
    evals = [(r["elapsed_s"], r["eval_loss"]) for r in records if r.get("event") == "global_eval"]
    if evals:
        ax.plot(*zip(*evals, strict=True), "k-o", label="global eval (held-out)")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("geofed local federation")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
