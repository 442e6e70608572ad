"""`geofed local`: one PS and N client processes on 127.0.0.1 — the embedded default.

Everything is real: processes, sockets, one-time tokens, the master's bootstrap, compressed deltas.
The corpus is the Python standard library's own sources, split non-IID across clients by module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from geofed.cli_flags import SettingsError, apply_overrides, load_settings_file, validate_settings
from geofed.config import FederationConfig

# Small enough for 2 CPU cores shared by N clients and the PS; large enough to learn Python syntax.
LOCAL_DEFAULTS: dict = {
    "name": "local",
    "model": {"family": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 128, "seed": 0},
    "training": {"lr": 3e-3, "warmup_steps": 10, "batch_size": 8, "local_steps": 40, "sync_interval_s": 6.0,
                 "eval_every": 40, "eval_batches": 2, "keep_best": 3},
    "aggregation": {"mode": "async", "buffer_size": 1, "outer_optimizer": "fedavg", "global_lr": 0.5,
                    "max_staleness": 16},
    "codec": {"name": "int8", "entropy": "huffman", "error_feedback": True},
}
EVAL_BATCHES = 8
EVAL_BATCH_SIZE = 8


@dataclass
class LocalOptions:
    clients: int = 3
    data: str | None = None
    duration_s: float = 100.0
    run_dir: str = "runs"
    slow_client: float = 1.0
    federation_file: str | None = None
    overrides: list[str] = field(default_factory=list)
    quiet: bool = False


def _say(msg: str) -> None:
    print(msg, flush=True)


def _fail(msg: str) -> int:
    print(f"geofed local: {msg}", file=sys.stderr, flush=True)
    return 2


def _write_lists(run: Path, opts: LocalOptions) -> tuple[list[Path], list[Path]]:
    """Per-client `.list` files and the held-out evaluation files."""
    from .corpus import CorpusError, split_directory, stdlib_split

    data_dir = run / "data"
    data_dir.mkdir(parents=True)
    if opts.data:
        groups = split_directory(opts.data, opts.clients + 1)
        if any(not g for g in groups):
            raise CorpusError(f"{opts.data} has too few top-level entries to split across {opts.clients} clients "
                              "and a held-out evaluation set")
        clients, held = groups[:-1], groups[-1]
    else:
        split = stdlib_split(opts.clients)
        clients, held = [list(c) for c in split.clients], list(split.eval)
    lists = []
    for i, files in enumerate(clients):
        path = data_dir / f"client-{i}.list"
        path.write_text("".join(f"{p}\n" for p in files))
        lists.append(path)
    (data_dir / "eval.list").write_text("".join(f"{p}\n" for p in held))
    return lists, held


class GlobalEvaluator:
    """Eval loss of a global model on the held-out files (the number the summary line reports)."""

    def __init__(self, fed: FederationConfig, eval_files: list[Path], cache: Path) -> None:
        import torch

        from .data import TokenStream, load_tokens
        from .model import build_model
        from .tokenizer import load_tokenizer

        torch.set_num_threads(1)
        tokens, _ = load_tokens(eval_files, load_tokenizer(None), cache=cache)
        self.stream = TokenStream(tokens, fed.model.block_size, seed=1234, eval_tokens=tokens)
        self.batches = self.stream.eval_batches(EVAL_BATCHES, EVAL_BATCH_SIZE)
        self.model = build_model(fed.model)  # same seed as the master: this is Θ0
        self.model.eval()

    def loss(self, flat=None) -> float:
        import torch

        from .flat import load_flat_
        from .model import lm_loss

        if flat is not None:
            load_flat_(self.model, torch.as_tensor(flat))
        with torch.no_grad():
            return float(sum(lm_loss(self.model, b).item() for b in self.batches) / len(self.batches))


def _newest_ps_checkpoint(ckpt_dir: Path):
    from ps_server.checkpoint import CheckpointStore

    ckpt = CheckpointStore(ckpt_dir).load_latest()
    return ckpt if ckpt is not None and ckpt.version > 0 else None


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
    from geofed.protocol.admin_client import AdminClient

    from .corpus import CorpusError

    try:
        data = apply_overrides(_merge(LOCAL_DEFAULTS, load_settings_file(opts.federation_file)), opts.overrides)
        fed = validate_settings(FederationConfig, data)
    except SettingsError as exc:
        return _fail(str(exc))
    run = Path(opts.run_dir).resolve() / time.strftime("%Y%m%d-%H%M%S")
    run.mkdir(parents=True, exist_ok=False)
    try:
        lists, held = _write_lists(run, opts)
    except CorpusError as exc:
        return _fail(str(exc))
    (run / "federation.yaml").write_text(yaml.safe_dump(fed.model_dump(mode="json"), sort_keys=False))
    _say(f"geofed local: {opts.clients} clients, model {fed.model.family} {fed.model.n_layer}x{fed.model.n_embd}, "
         f"{fed.aggregation.mode} {fed.aggregation.outer_optimizer}, codec {fed.codec.name}+{fed.codec.entropy}, "
         f"{opts.duration_s:.0f}s; run directory {run}")

    # PYTHONSAFEPATH: never let the working directory (a checkout holds `operator/`) shadow the stdlib.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs: list[subprocess.Popen] = []
    logs = run / "logs"
    logs.mkdir()
    ps_log = open(logs / "ps.log", "wb")  # noqa: SIM115 - closed in finally
    ready = run / "ps.port"
    ps = subprocess.Popen(
        [sys.executable, "-m", "geofed.cli", "ps", "--insecure", "--host", "127.0.0.1", "--port", "0",
         "--metrics-port", "0", "--federation", str(run / "federation.yaml"), "--checkpoint-dir", str(run / "ps"),
         "--admin-token-file", str(run / "admin.token"), "--ready-file", str(ready), "--keep-checkpoints", "2"],
        stdout=ps_log, stderr=subprocess.STDOUT, env=env,
    )
    procs.append(ps)
    t0 = time.monotonic()
    try:
        while not (ready.exists() and ready.read_text().strip()):
            if ps.poll() is not None:
                return _fail(f"the parameter server exited with {ps.returncode}; see {logs / 'ps.log'}")
            if time.monotonic() - t0 > 60:
                return _fail("the parameter server did not start within 60 s")
            time.sleep(0.1)
        address = f"127.0.0.1:{ready.read_text().strip()}"
        admin = AdminClient(address, (run / "admin.token").read_text().strip(), insecure=True)
        tails = []
        for i, data_list in enumerate(lists):
            client_id = f"local.client-{i}"
            token, _ = admin.create_token(client_id, site="local", ttl_s=600, master=(i == 0))
            token_file = run / "tokens" / f"client-{i}"
            token_file.parent.mkdir(exist_ok=True, mode=0o700)
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token)
            work = run / "clients" / f"client-{i}"
            slow = opts.slow_client if i == len(lists) - 1 else 1.0
            cmd = [sys.executable, "-m", "geofed.cli", "client", "--ps", address, "--client-id", client_id,
                   "--token-file", str(token_file), "--data", str(data_list), "--work-dir", str(work), "--insecure",
                   "--duration-s", str(opts.duration_s), "--seed", str(i), "--slowdown", str(slow)]
            log = open(logs / f"client-{i}.log", "wb")  # noqa: SIM115 - lives as long as the process
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
            tails.append(_Tail(work / "metrics.jsonl"))
        evaluator = GlobalEvaluator(fed, held, run / "eval-tokens.npy")
        initial = evaluator.loss()
        _say(f"initial global eval loss {initial:.3f} (held-out modules: {len(held)} files)")
        records = [{"t": time.time(), "event": "global_eval", "version": 1, "eval_loss": initial, "elapsed_s": 0.0}]
        records += _watch(procs[1:], tails, admin, opts, run, evaluator, t0)
        admin.close()
        failed = [i for i, p in enumerate(procs[1:]) if p.returncode not in (0, None)]
        ps.send_signal(signal.SIGTERM)
        ps.wait(60)
        ckpt = _newest_ps_checkpoint(run / "ps")
        if ckpt is None:
            return _fail(f"no global model was produced; see {logs}")
        final = evaluator.loss(ckpt.flat)
        records.append({"t": time.time(), "event": "global_eval", "version": ckpt.version, "eval_loss": final,
                        "elapsed_s": time.monotonic() - t0})
        _write_outputs(run, records, evaluator, ckpt)
        if failed:
            _say(f"warning: client(s) {failed} exited with an error; see {logs}")
        _say(f"global version {ckpt.version}, {sum(r.get('payload_bytes', 0) for r in records) / 1e6:.2f} MB pushed")
        _say(f"eval loss: {initial:.2f} -> {final:.2f}")
        _say(f"run directory: {run}")
        return 0 if not failed else 1
    except KeyboardInterrupt:
        return 130
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        ps_log.close()


def _merge(base: dict, override: dict) -> dict:
    out = json.loads(json.dumps(base))
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _watch(clients, tails, admin, opts, run, evaluator, t0) -> list[dict]:
    """Live progress until every client has exited; periodic global evals for the loss-vs-time plot."""
    records: list[dict] = []
    last_eval = time.monotonic()
    while True:
        for tail in tails:
            for rec in tail.new():
                rec["elapsed_s"] = time.monotonic() - t0
                records.append(rec)
                if not opts.quiet:
                    _say(f"  [{rec['elapsed_s']:5.0f}s] {rec['client']:<16} round {rec['round']:>3} "
                         f"step {rec['step']:>5} "
                         f"loss {rec['train_loss']:.3f}  {rec['tokens_per_s']:7.0f} tok/s  -> v{rec['version']:<4} "
                         f"{rec['payload_bytes'] / 1e3:7.1f} kB ({rec['ratio'] * 100:.1f}% of fp32, {rec['codec']})")
        if time.monotonic() - last_eval > 10:
            last_eval = time.monotonic()
            ckpt = _newest_ps_checkpoint(run / "ps")
            if ckpt is not None:
                loss = evaluator.loss(ckpt.flat)
                records.append({"t": time.time(), "event": "global_eval", "version": ckpt.version, "eval_loss": loss,
                                "elapsed_s": time.monotonic() - t0})
                try:
                    status = admin.status()
                    connected = status["connected_clients"]
                except Exception:  # progress display only; the PS may be busy
                    connected = "?"
                _say(f"== global v{ckpt.version}: eval loss {loss:.3f}, {connected} clients connected")
        if all(p.poll() is not None for p in clients):
            for tail in tails:
                records.extend(tail.new())
            return records
        time.sleep(0.5)


def _write_outputs(run: Path, records: list[dict], evaluator: GlobalEvaluator, ckpt) -> None:
    """metrics.jsonl, the final global model (safetensors via save_pretrained), loss-vs-time PNG."""
    from .flat import load_flat_

    with open(run / "metrics.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    import torch

    load_flat_(evaluator.model, torch.as_tensor(ckpt.flat))
    evaluator.model.save_pretrained(run / "final_model")
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
