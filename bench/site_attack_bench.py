"""One hostile site among four, through the PS's own aggregation, with real AdamW deltas as the honest updates.

    .venv/bin/python bench/site_attack_bench.py [--runs 3] [--rounds 8] [--out bench/results/site_attack]

Per run: three honest clients (one site each) train the default model with their real AdamW
(`client_agent.training.trainer.LocalTrainer`, default training settings) on their own module split of the Python
standard library, round-robin, each from the model the PS published last (async, K = 1, the federation
defaults). Their deltas are recorded once per run and then *replayed*, identically, into a fresh in-process
`Aggregator` per condition: the honest-only control and each attack, under each outer optimizer. A fourth site
pushes after every third honest push:

- scaled: 10 × the last honest delta; sign_flip: −1 × it; noise: Gaussian of 10 × its RMS;
- sybil: scaled, through 4 client ids of the site, each trying every base version;
- drift: 0.95 × its bound, always along one random direction;
- ratchet: each push 3 × its own previous accepted norm (along the last honest delta).

Reported per condition: the largest step of any version over the largest step of the control run, the final
distance to the control's model over the control's mean honest step, and the final held-out loss against the
control's. What a real run does differently: here the honest deltas do not react to the attacked model (they
are the control run's), so the loss column measures the attack's displacement, not the federation's
recovery from it; bench/attack_bench.py runs these attacks closed loop against a real `geofed ps`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from real_clients import honest_trainers  # noqa: E402

from client_agent.training.flat import flat_numel, flatten, load_flat_, manifest  # noqa: E402
from client_agent.training.trainer import LocalTrainer  # noqa: E402
from geofed.config import FederationConfig  # noqa: E402
from ps_server.aggregation.aggregator import Aggregator  # noqa: E402
from ps_server.aggregation.displacement import DeltaSketch  # noqa: E402
from ps_server.aggregation.sites import FixedSites  # noqa: E402
from ps_server.errors import PushRejected  # noqa: E402
from ps_server.global_model import GlobalModel, TensorEntry  # noqa: E402
from ps_server.ingest import PushHeader  # noqa: E402

ATTACKS = ("none", "scaled", "sign_flip", "noise", "sybil", "drift", "ratchet")
# The outer step's learning rate: FedAvg's default η = 0.5; Nesterov at the same 0.5 (μ = 0.9), where momentum
# carries each delta 10 × as far as FedAvg (its default is 0.05, which carries it as far); Adam's default 0.01.
OUTERS = {"fedavg": 0.5, "nesterov": 0.5, "adam": 0.01}
HONEST = 3


class MemoryPush:
    """A validated push held in memory: what the ingest hands the aggregator (values, norm, sketch)."""

    def __init__(self, client_id: str, values: np.ndarray, base: int, upload: str, steps: int, tokens: int) -> None:
        self.client_id, self.values, self.numel, self.codec_name = client_id, values, values.size, "fp32"
        wide = values.astype(np.float64)
        self.norm = float(np.linalg.norm(wide))
        sketch = DeltaSketch()
        sketch.add(wide)
        self.sketch = sketch.values
        self.header = PushHeader(
            base_version=base, upload_id=upload, codec_header=b"", payload_bytes=0, num_tokens=tokens, local_steps=steps
        )

    def iter_values(self, max_numel: int):
        for off in range(0, self.numel, 1 << 20):
            yield off, self.values[off : off + (1 << 20)]

    def close(self) -> None:
        pass


def honest_run(seed: int, rounds: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray]], list, FederationConfig]:
    """θ0 and the honest pushes (client, δ) of one control run, in order, plus the held-out token streams."""
    fed = FederationConfig()
    t = fed.training
    trainers = honest_trainers(fed, HONEST, seed)
    models = [tr.model for tr in trainers]
    theta0 = flatten(models[0]).numpy().copy()
    agg = aggregator(fed, theta0, manifest(models[0]))
    pushes = []
    for r in range(rounds):
        for i, (m, tr) in enumerate(zip(models, trainers, strict=True)):
            current = agg.model.current()
            load_flat_(m, torch.from_numpy(current.flat.copy()))
            tr.train(t.local_steps)
            delta = (flatten(m).numpy() - current.flat).astype(np.float32)
            pushes.append((i, delta))
            agg.submit(
                MemoryPush(
                    f"site{i}.trainer",
                    delta,
                    current.version,
                    f"h/{r}/{i}",
                    t.local_steps,
                    t.batch_size * fed.model.block_size * t.local_steps,
                )
            )
    return theta0, pushes, trainers, fed


def aggregator(fed: FederationConfig, theta0: np.ndarray, entries) -> Aggregator:
    agg = Aggregator(fed, GlobalModel(), sites=FixedSites(dotted=True))
    agg.restore(1, theta0.copy(), tuple(TensorEntry(e.name, e.shape, e.dtype) for e in entries), {})
    return agg


def replay(fed: FederationConfig, theta0, entries, pushes, attack: str, rng: np.random.Generator) -> dict:
    """The honest pushes again, with the hostile site's after every third; the model after each version."""
    t = fed.training
    full = t.batch_size * fed.model.block_size * t.local_steps
    agg = aggregator(fed, theta0, entries)
    direction = rng.standard_normal(theta0.size)
    direction /= np.linalg.norm(direction)
    steps, honest_scaled = [], 0
    before = agg.model.current().flat.astype(np.float64)
    for k, (i, delta) in enumerate(pushes):
        v = agg.model.current().version
        push = MemoryPush(f"site{i}.trainer", delta, v, f"h/{k}", t.local_steps, full)
        if agg.guard.bound(push, agg.model.current()).scale < 1.0:  # what submit will scale it by
            honest_scaled += 1
        agg.submit(push)
        after = agg.model.current().flat.astype(np.float64)
        steps.append(float(np.linalg.norm(after - before)))
        before = after
        if attack == "none" or k % HONEST != HONEST - 1:
            continue
        v = agg.model.current().version
        if attack == "scaled" or attack == "sybil":
            evil = 10 * delta
        elif attack == "sign_flip":
            evil = -delta
        elif attack == "noise":
            evil = rng.standard_normal(delta.size) * 10 * float(np.sqrt(np.mean(delta.astype(np.float64) ** 2)))
        elif attack == "drift":
            _, start = agg.guard.limits(agg.model.current(), delta.size)
            evil = 0.95 * agg.guard.norms.limit("evil", math.inf, start) * direction
        else:  # ratchet: 3 × its own latest accepted norm
            own = agg.guard.norms.norms.get("evil")
            base_norm = own[-1] if own else float(np.linalg.norm(delta))
            evil = 3 * base_norm * delta / float(np.linalg.norm(delta))
        ids = [f"evil.s{j}" for j in range(4)] if attack == "sybil" else ["evil.s0"]
        for j, cid in enumerate(ids):
            p = MemoryPush(cid, np.asarray(evil, dtype=np.float32), v, f"e/{k}/{j}", t.local_steps, full)
            try:
                agg.submit(p)
            except PushRejected:
                continue  # the site quota: one delta per site per base version
            after = agg.model.current().flat.astype(np.float64)
            steps.append(float(np.linalg.norm(after - before)))
            before = after
    return {"final": agg.model.current().flat.copy(), "steps": steps, "honest_scaled": honest_scaled}


def held_out_loss(trainer: LocalTrainer, flat: np.ndarray, batches: int) -> float:
    load_flat_(trainer.model, torch.from_numpy(flat.copy()))
    return trainer.evaluate(batches)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=8, help="rounds of the three honest clients per run")
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "site_attack"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[tuple[str, str], list[dict]] = {}
    for run in range(args.runs):
        t0 = time.monotonic()
        theta0, pushes, trainers, base = honest_run(run, args.rounds)
        entries = manifest(trainers[0].model)
        assert flat_numel(trainers[0].model) == theta0.size
        for outer, lr in OUTERS.items():
            settings = {"outer_optimizer": outer, "global_lr": lr}
            fed = base.model_copy(update={"aggregation": base.aggregation.model_copy(update=settings)})
            control = replay(fed, theta0, entries, pushes, "none", np.random.default_rng(run))
            control_loss = held_out_loss(trainers[0], control["final"], args.eval_batches)
            mean_step = statistics.mean(control["steps"])
            for attack in ATTACKS:
                got = (
                    control
                    if attack == "none"
                    else replay(fed, theta0, entries, pushes, attack, np.random.default_rng(run))
                )
                loss = control_loss if attack == "none" else held_out_loss(trainers[0], got["final"], args.eval_batches)
                row = {
                    "run": run,
                    "outer": outer,
                    "attack": attack,
                    "max_step_over_control": max(got["steps"]) / max(control["steps"]),
                    "final_distance_in_honest_steps": float(
                        np.linalg.norm(got["final"].astype(np.float64) - control["final"])
                    )
                    / mean_step,
                    "loss": loss,
                    "control_loss": control_loss,
                    "honest_scaled": got["honest_scaled"],
                    "honest_pushes": len(pushes),
                }
                rows.setdefault((outer, attack), []).append(row)
                print(json.dumps(row), flush=True)
        print(json.dumps({"run": run, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    (out / "rows.json").write_text(json.dumps([r for v in rows.values() for r in v], indent=1))
    lines = [
        "| outer | attack | max step / control's | final distance (honest steps) | loss − control's | honest scaled |",
        "|---|---|---|---|---|---|",
    ]
    for (outer, attack), rs in rows.items():

        def cell(key: str, rs=rs) -> str:
            vals = [r[key] for r in rs]
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            return f"{statistics.mean(vals):.2f} ± {sd:.2f}"

        dloss = [r["loss"] - r["control_loss"] for r in rs]
        sd = statistics.stdev(dloss) if len(dloss) > 1 else 0.0
        scaled = f"{sum(r['honest_scaled'] for r in rs)}/{sum(r['honest_pushes'] for r in rs)}"
        lines.append(
            f"| {outer} | {attack} | {cell('max_step_over_control')} | "
            f"{cell('final_distance_in_honest_steps')} | {statistics.mean(dloss):+.3f} ± {sd:.3f} | {scaled} |"
        )
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
