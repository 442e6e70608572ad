"""The steps of `bench/gpu_check.sh`: the client's CUDA path end to end, and training throughput with its MFU.

Each step is one subcommand, run by the shell script in its own process under a timeout, so one step that
hangs or crashes leaves the others to run. A step writes `<step>.json` into `--out` and prints one last line
`SUMMARY key=value ...` (the numbers the script's summary shows); its exit code says PASS (0) or FAIL.

- `env`: torch, the device and precision the client would pick (`client_agent.site.pick_device`,
  `client_agent.training.precision.pick_precision` with `TrainingConfig.precision`'s default), the peak FLOPs assumed.
- `federation`: a plaintext PS and one master client (`geofed ps`, `geofed client`, as `geofed local` starts
  them) on the default device and precision settings; the client trains a round and syncs (its checkpoint),
  is preempted (SIGTERM), and a relaunch with a fresh one-time token resumes from that checkpoint and syncs
  again. The client's own log says which device, precision and micro-batch it chose.
- `throughput --model NAME`: the client's `LocalTrainer` (autocast at the picked precision, auto micro-batch,
  gradient accumulation, AdamW) on a model from `client_agent.training.model.build_model`, from random weights on
  random tokens; tokens/s over timed steps after warm-up, and MFU against the assumed peak.

`--dry-run` gives every step toy sizes (a few steps, tiny models) so the whole check runs on a CPU in about a
minute; it checks the plumbing, not the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

# Dense bf16 tensor-core peaks (no sparsity), in TFLOP/s, from the vendors' data sheets; the first entry
# whose key occurs in `torch.cuda.get_device_name` wins, so the more specific names come first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # SXM: "NVIDIA H100 80GB HBM3"
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("L4", 121.0),
    ("RTX 4090", 165.0),  # fp32 accumulation, as autocast's matmuls use
    ("RTX 3090", 71.0),
    ("V100", 125.0),  # fp16: V100 has no bf16 and the client picks fp16 there
)
PEAK_ENV = "GPU_CHECK_PEAK_TFLOPS"  # overrides the table (an unlisted GPU, a clock-limited one)

# Shapes from the models' published configs. The Llama row has Llama 3.2 1B's depth, width, heads, vocabulary
# and context; `ModelConfig` has no grouped-query attention and derives the SwiGLU width itself, so it has
# about 1.1B parameters rather than 1.24B (the count used for MFU is the built model's own).
MODELS: dict[str, dict] = {
    "gpt2-124m": {"family": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257,
                  "block_size": 1024, "batch_size": 16},
    "gpt2-medium": {"family": "gpt2", "n_layer": 24, "n_head": 16, "n_embd": 1024, "vocab_size": 50257,
                    "block_size": 1024, "batch_size": 16},
    "llama-1b": {"family": "llama", "n_layer": 16, "n_head": 32, "n_embd": 2048, "vocab_size": 128256,
                 "block_size": 2048, "batch_size": 8},
}
TOY_MODELS: dict[str, dict] = {
    "gpt2-124m": {"family": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 257,
                  "block_size": 32, "batch_size": 4},
    "gpt2-medium": {"family": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 257,
                    "block_size": 32, "batch_size": 4},
    "llama-1b": {"family": "llama", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 512,
                 "block_size": 32, "batch_size": 4},
}
STEPS = {"warmup": 3, "timed": 10}
TOY_STEPS = {"warmup": 1, "timed": 3}

# The federation step's model and round: GPT-2 124M's shapes on the byte tokenizer (a real-size transfer and
# checkpoint), or the demo's small model.
FEDERATION_MODEL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 256}
TOY_FEDERATION_MODEL = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64}


def peak_tflops(device_name: str) -> tuple[float | None, str]:
    """(peak dense bf16 TFLOP/s assumed for `device_name`, where the figure comes from); None: unknown."""
    if os.environ.get(PEAK_ENV):
        return float(os.environ[PEAK_ENV]), f"${PEAK_ENV}"
    for key, tflops in PEAK_BF16_TFLOPS:
        if key in device_name:
            return tflops, f"data sheet ({key})"
    return None, "unknown device: set $" + PEAK_ENV


def flops_per_token(n_params: int, n_layer: int, n_embd: int, block_size: int) -> float:
    """Training FLOPs per token (PaLM appendix B, nanoGPT's `estimate_mfu`): 6 per weight (forward and
    backward matmuls) plus 12·L·d·T for attention's scores and weighted sum."""
    return 6.0 * n_params + 12.0 * n_layer * n_embd * block_size


def summary(result: dict, keys: tuple[str, ...]) -> str:
    """The one line the shell script reads: `SUMMARY k=v ...` (floats to 4 significant digits)."""
    parts = []
    for key in keys:
        value = result.get(key)
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return "SUMMARY " + " ".join(parts)


def _finish(out: Path, name: str, result: dict, keys: tuple[str, ...]) -> int:
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result, keys), flush=True)
    return 0 if result.get("ok") else 1


def device_facts() -> dict:
    """What the client would run on here: its device and precision picks, the device's name and peak."""
    import torch

    from client_agent.site import pick_device
    from client_agent.training.precision import pick_precision
    from geofed.config import TrainingConfig

    device = pick_device("auto")  # the client's `--device` default
    precision = pick_precision(TrainingConfig().precision, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak, source = peak_tflops(name)
    return {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "device": str(device),
        "device_name": name,
        "precision": precision.name,
        "peak_tflops": peak,
        "peak_source": source,
    }


def expected_pick(dry_run: bool) -> tuple[str, str]:
    """(device type, precision) the client must pick: the CPU in fp32 for a dry run; else CUDA, in bf16 where
    the GPU has it (fp16 with loss scaling on older GPUs), as `client_agent.training.precision` promises."""
    if dry_run:
        return "cpu", "fp32"
    import torch

    return "cuda", "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"


def run_env(out: Path, dry_run: bool) -> int:
    facts = device_facts()
    expected = expected_pick(dry_run)
    got = (facts["device"].split(":")[0], facts["precision"])
    facts["ok"] = got == expected
    if not facts["ok"]:
        facts["error"] = f"expected device/precision {'/'.join(expected)}, the client would pick {'/'.join(got)}"
    return _finish(out, "env", facts, ("ok", "device", "precision", "peak_tflops", "device_name"))


def run_throughput(out: Path, dry_run: bool, model: str) -> int:
    import numpy as np
    import torch

    from client_agent.data.streams import TokenStream
    from client_agent.site import pick_device
    from client_agent.training.model import build_model
    from client_agent.training.precision import pick_precision
    from client_agent.training.trainer import LocalTrainer
    from geofed.config import ModelConfig, TrainingConfig

    shape = dict((TOY_MODELS if dry_run else MODELS)[model])
    steps = TOY_STEPS if dry_run else STEPS
    batch_size = shape.pop("batch_size")
    facts = device_facts()
    device = pick_device("auto")
    cfg = ModelConfig(**shape)
    # The client's defaults for everything but the batch: precision auto, micro-batch 0 (auto).
    training = TrainingConfig(batch_size=batch_size, eval_every=10**6)
    torch.manual_seed(0)
    net = build_model(cfg)
    n_params = sum(p.numel() for n, p in net.named_parameters() if "wpe" not in n)  # position tables: no FLOPs
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, size=(steps["warmup"] + steps["timed"] + 4) * batch_size
                          * (cfg.block_size + 1), dtype=np.int64)
    stream = TokenStream(tokens, cfg.block_size, seed=0)
    trainer = LocalTrainer(net, training, stream, device, precision=pick_precision(training.precision, device))
    first = trainer.train(steps["warmup"])

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sync()
    t0 = time.perf_counter()
    timed = trainer.train(steps["timed"])
    sync()
    seconds = time.perf_counter() - t0
    tokens_per_s = timed.tokens / seconds
    per_token = flops_per_token(n_params, cfg.n_layer, cfg.n_embd, cfg.block_size)
    achieved = tokens_per_s * per_token / 1e12
    peak = facts["peak_tflops"]
    result = {
        **facts,
        "model": model,
        "shape": shape,
        "params": n_params,
        "batch_size": batch_size,
        "micro_batch": trainer.micro_batch_size,
        "micro_steps": len(trainer.plan),
        "steps": timed.steps,
        "tokens": timed.tokens,
        "seconds": seconds,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": per_token,
        "achieved_tflops": achieved,
        "mfu": achieved / peak if peak else None,
        "loss_warmup": first.mean_loss,
        "loss_timed": timed.mean_loss,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
    }
    result["ok"] = timed.steps == steps["timed"] and bool(np.isfinite(timed.mean_loss)) and tokens_per_s > 0
    if not result["ok"]:
        result["error"] = f"{timed.steps} of {steps['timed']} steps, loss {timed.mean_loss}"
    return _finish(out, f"throughput-{model}", result, (
        "ok", "tokens_per_s", "mfu", "achieved_tflops", "peak_tflops", "params", "micro_batch", "precision", "device",
    ))


def _log_event(log: Path, pattern: str) -> re.Match | None:
    return re.search(pattern, log.read_text(errors="replace")) if log.exists() else None


def run_federation(out: Path, dry_run: bool, timeout_s: float) -> int:
    from client_agent.data.corpus import stdlib_split, write_file_list
    from client_agent.preemption import PREEMPTED_EXIT
    from geofed_apps.launch import PSProcess, start_client, stop, wait_until

    facts = device_facts()
    work = Path(tempfile.mkdtemp(prefix="geofed-gpu-check-", dir=out))
    fed = {
        "model": TOY_FEDERATION_MODEL if dry_run else FEDERATION_MODEL,
        "training": {"batch_size": 4 if dry_run else 8, "local_steps": 3 if dry_run else 20,
                     "sync_interval_s": 600, "eval_every": 1000},
        "aggregation": {"mode": "async", "buffer_size": 1},
        "codec": {"name": "int8"},
    }
    data = write_file_list(work / "client.list", stdlib_split(2).clients[0][:20 if dry_run else 200])
    deadline = time.monotonic() + timeout_s
    result: dict = {**facts, "ok": False, "work": str(work)}
    ps = PSProcess(work / "ps", fed)
    proc = None
    try:
        ps.start()
        admin = ps.admin()

        def launch(attempt: int, master: bool) -> tuple:
            token, _ = admin.create_token("gpucheck.c0", master=master)
            log = work / f"client-{attempt}.log"
            p = start_client(token, work / f"token-{attempt}", log, ps=ps.address, client_id="gpucheck.c0",
                             data=data, work_dir=work / "client")
            return p, log

        def exited() -> str | None:
            return None if proc.poll() is None else f"the client exited {proc.returncode}"

        def until(log: Path, pattern: str, what: str) -> re.Match:
            left = max(1.0, deadline - time.monotonic())
            return wait_until(lambda: _log_event(log, pattern), left, what, period=0.2, dead=exited)

        t0 = time.monotonic()
        proc, log = launch(0, master=True)
        ready = until(log, r"event=trainer_ready client=\S+ device=(\S+) precision=(\S+) micro_batch=(\d+) "
                      r"micro_steps=(\d+)", "the client's trainer")
        first = until(log, r"event=sync client=gpucheck.c0 round=1 step=(\d+) version=(\d+) status=(\S+)",
                      "the first sync")
        result.update(client_device=ready.group(1), client_precision=ready.group(2),
                      micro_batch=int(ready.group(3)), micro_steps=int(ready.group(4)),
                      first_sync_s=time.monotonic() - t0, first_sync_status=first.group(3))
        checkpoints = sorted(p.name for p in (work / "client" / "checkpoints").glob("*"))
        result["checkpoints"] = checkpoints
        code = stop(proc, signal.SIGTERM, 60.0)  # a preemption: the last sync's checkpoint is the resume point
        result["preempted_exit"] = code
        t1 = time.monotonic()
        proc, log = launch(1, master=False)
        resumed = until(log, r"event=resumed client=\S+ rank=0 step=(\d+)", "the relaunch to resume")
        again = until(log, r"event=sync client=gpucheck.c0 round=\d+ step=(\d+) version=(\d+) status=(\S+)",
                      "a sync after the rejoin")
        result.update(resumed_step=int(resumed.group(1)), rejoin_sync_step=int(again.group(1)),
                      rejoin_version=int(again.group(2)), rejoin_sync_s=time.monotonic() - t1)
        expected = expected_pick(dry_run)
        problems = []
        if (result["client_device"].split(":")[0], result["client_precision"]) != expected:
            problems.append(f"the client ran on {result['client_device']}/{result['client_precision']}, "
                            f"expected {'/'.join(expected)}")
        if not checkpoints:
            problems.append("no client checkpoint after the first sync")
        if code != PREEMPTED_EXIT:
            problems.append(f"the preempted client exited {code}, not {PREEMPTED_EXIT}")
        if result["resumed_step"] < int(first.group(1)):
            problems.append(f"resumed at step {result['resumed_step']}, before the checkpointed {first.group(1)}")
        result["ok"] = not problems
        if problems:
            result["error"] = "; ".join(problems)
    except Exception as exc:  # the step reports its error in its JSON and summary line, and fails
        result["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    finally:
        stop(proc, signal.SIGKILL, 10.0)
        ps.kill()
    return _finish(out, "federation", result, (
        "ok", "client_device", "client_precision", "micro_batch", "resumed_step", "rejoin_sync_step",
        "first_sync_s", "rejoin_sync_s",
    ))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("env", "federation", "throughput"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true", help="toy sizes on whatever device is visible")
    p.add_argument("--model", choices=sorted(MODELS), help="throughput: which model")
    p.add_argument("--timeout", type=float, default=300.0, help="federation: seconds for the whole step")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "env":
        return run_env(args.out, args.dry_run)
    if args.step == "federation":
        return run_federation(args.out, args.dry_run, args.timeout)
    if not args.model:
        p.error("throughput needs --model")
    return run_throughput(args.out, args.dry_run, args.model)


if __name__ == "__main__":
    sys.exit(main())
