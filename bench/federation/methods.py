"""The methods compared, as federation settings over one shared base (same code base, same run).

Baselines (paper §III-C2 compares against the same three): synchronous FedAvg (every client does H
steps, barrier), DiLoCo (synchronous, outer Nesterov lr 0.7 momentum 0.9, its recommended values),
FedNova (synchronous, unequal local work in a fixed time T, normalised at the PS); all three send fp32
deltas as published. "ours" is this system's defaults (`geofed local`): asynchronous bounded staleness,
wall-clock sync interval, int8 + Huffman deltas with error feedback; two one-setting variants of it
(η = 0.5; a buffer of K = 4 deltas) show what the defaults leave on the table. The `codec-*` methods are
ours at η = 0.5 with another delta codec, for the rate-distortion table. "single" is one process on
the union of the data (the quality ceiling), run by `bench.federation.single`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from geofed.config import CodecConfig, FederationConfig
from geofed_apps.local import LOCAL_DEFAULTS, merge_settings

from .barrier import BARRIER_S, sync_aggregation
from .scenario import Scenario, ScenarioError


def _defaults_text() -> str:
    """The 'ours (defaults)' description, read from the settings it runs with so it cannot drift from them:
    geofed's defaults under the harness's `BENCH_DEFAULTS` (which fix the codec at int8: geofed's default
    since 2026-12-01, and what every saved run used; a difference is named)."""
    fed = FederationConfig.model_validate(merge_settings(LOCAL_DEFAULTS, BENCH_DEFAULTS))
    agg, codec, shipped = fed.aggregation, fed.codec, CodecConfig().name
    note = "" if codec.name == shipped else f" (the harness's; geofed's default codec is {shipped})"
    return (
        f"geofed's defaults: {agg.mode}, buffer {agg.buffer_size}, η = {agg.outer_lr:g}, staleness-scaled "
        f"deltas, max staleness {agg.max_staleness}, H steps or T seconds, {codec.name} codec ({codec.entropy}) "
        f"with{'' if codec.error_feedback else 'out'} error feedback{note}, "
        f"{'overlapped' if fed.training.overlap_sync else 'round-by-round'} sync"
    )


FEDNOVA_MAX_STEPS = 100_000  # FedNova's local work is bounded by the wall-clock T only
FP32 = {"name": "fp32", "entropy": "none", "error_feedback": False}

# Harness-wide settings on top of `geofed local`'s defaults: the harness evaluates the global model
# itself (after the run), so client-side evaluations would only steal CPU from training.
# The settings the saved hetero-wan/local3 results ran with (geofed local's defaults before the
# federation defaults were unified), so new runs stay comparable with them.
BENCH_DEFAULTS: dict[str, Any] = {
    "training": {"eval_every": 1_000_000, "sync_interval_s": 6.0},
    "codec": {"name": "int8", "entropy": "huffman", "error_feedback": True},
}


@dataclass(frozen=True)
class Method:
    """One contender: its settings as overrides of the scenario's base settings (FedNova keeps the base T)."""

    name: str
    label: str
    kind: Literal["federated", "single"]
    summary: str
    overrides: dict[str, Any]


DAMPED = {"aggregation": {"global_lr": 0.5}}
# The inner learning rate decays over the run: warm-up by each client's own steps, then a cosine to 0.1 × lr
# over the federation's progress (seconds since Θ0 over the scenario's budget; tokens over the token
# budget in the single process). `federation_for` fills run_duration_s with the scenario's budget.
RUN_COSINE = {"training": {"lr_schedule": "cosine", "lr_progress": "run_time", "lr_min_ratio": 0.1}}


def _codec(name: str, *, block: int = 0, ef: bool = True, entropy: str = "huffman") -> Method:
    """The rate-distortion variant of `RATEDIST_BASE` (ours, η = 0.5) with another delta codec."""
    codec = {"name": name, "entropy": entropy, "block_scales": block, "error_feedback": ef}
    tag = f"{name}{f'-b{block}' if block else ''}{'' if ef or name == 'fp32' else '-noef'}"
    scales = f"per-block scales ({block} elems)" if block else "global min-max"
    detail = f"{scales}, {entropy}" if name.startswith("int") else "no quantisation"
    return Method(
        f"codec-{tag}",
        f"ours η=0.5, {tag}",
        "federated",
        f"ours, η = 0.5, codec {name} ({detail}), error feedback {'on' if ef else 'off'}",
        {**DAMPED, "codec": codec},
    )


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "fedavg",
            "sync FedAvg",
            "federated",
            "sync, barrier, H local steps, FedAvg (η = 1), fp32 deltas",
            {"aggregation": sync_aggregation("fedavg", 1.0), "training": {"sync_interval_s": BARRIER_S}, "codec": FP32},
        ),
        Method(
            "diloco",
            "DiLoCo",
            "federated",
            "sync, barrier, H local steps, outer Nesterov lr 0.7 μ 0.9, fp32 deltas",
            {
                "aggregation": sync_aggregation("nesterov", 0.7, momentum=0.9),
                "training": {"sync_interval_s": BARRIER_S},
                "codec": FP32,
            },
        ),
        Method(
            "fednova",
            "FedNova",
            "federated",
            "sync, barrier, local work = T seconds (unequal steps), FedNova normalisation, fp32 deltas",
            {
                "aggregation": sync_aggregation("fedavg", 1.0, fednova=True),
                "training": {"local_steps": FEDNOVA_MAX_STEPS},
                "codec": FP32,
            },
        ),
        Method(
            "ours",
            "ours (defaults)",
            "federated",
            _defaults_text(),
            {},
        ),
        Method(
            "ours-eta1",
            "ours, η=1",
            "federated",
            "ours with global learning rate η = 1 (the default before this benchmark) instead of 0.5",
            {"aggregation": {"global_lr": 1.0}},
        ),
        Method(
            "ours-damped",
            "ours, η=0.5 (pre-fix)",
            "federated",
            "η = 0.5 set explicitly; its saved runs predate the staleness-scaling fix (see NOTES.md)",
            DAMPED,
        ),
        Method(
            "ours-buffered",
            "ours, buffer K=4",
            "federated",
            "ours with an outer step every K = 4 deltas (FedBuff), staleness-weighted within the buffer",
            {"aggregation": {"buffer_size": 4}},
        ),
        Method(
            "ours-no-round-share",
            "ours, no round share",
            "federated",
            "ours with aggregation.round_share off: a site lands a bounded delta on every version however often it "
            "pushes; measures what the round share costs a federation whose honest sites push at different rates",
            {"aggregation": {"round_share": False}},
        ),
        Method(
            "ours-bound-2",
            "ours, norm bound ×2",
            "federated",
            "ours with aggregation.norm_bound_multiple 2 set explicitly (the default now); its saved runs "
            "(bench/results/hetero-wan/bound-2/) ran on the code before, where multiple 3 was the default and the "
            "displacement budget took the same multiple",
            {"aggregation": {"norm_bound_multiple": 2.0}},
        ),
        Method(
            "ours-autotune",
            "ours + autotune",
            "federated",
            "ours with every live-measured setting on (issue 14): codec auto (int8/int16/bf16 from the link), each "
            "client's T and H from its link and step time, aggregation mode auto (sync until the spread of client "
            "round times passes autotune.async_above, then async), straggler timeout from round times",
            {
                "codec": {"name": "auto"},
                "aggregation": {"mode": "auto"},
                "autotune": {"interval": True, "straggler_timeout": True},
            },
        ),
        Method(
            "ours-auto",
            "ours, mode auto",
            "federated",
            "ours with aggregation.mode auto alone (sync until the spread of client round times passes "
            "autotune.async_above, then async); not the default: it costs hetero-wan its synchronous start",
            {"aggregation": {"mode": "auto"}},
        ),
        Method(
            "ours-codec-auto",
            "ours, codec auto",
            "federated",
            "ours with the bit-width tuner (codec.name auto: int16 when a push fits sync_time_budget_s on the "
            "measured link, else int8; geofed's default codec until 2026-12-01) instead of int8",
            {"codec": {"name": "auto"}},
        ),
        Method(
            "ours-overlap",
            "ours, overlapped",
            "federated",
            "ours with training.overlap_sync: each client trains on while its delta uploads and the next model "
            "downloads (from base + η·δ, its own delta at the outer rate), and folds the newer model in with the "
            "progress made meanwhile",
            {"training": {"overlap_sync": True}},
        ),
        Method(
            "ours-round-by-round",
            "ours, round by round",
            "federated",
            "ours with training.overlap_sync false: each client waits for its push and the next model before "
            "it trains on (geofed's default until 2026-12-04)",
            {"training": {"overlap_sync": False}},
        ),
        Method(
            "ours-overlap-full",
            "ours, overlapped, own delta whole",
            "federated",
            "ours-overlap with training.overlap_eager full: the round beside the transfer starts from base + δ "
            "(the client's own model) instead of base + η·δ",
            {"training": {"overlap_sync": True, "overlap_eager": "full"}},
        ),
        Method(
            "ours-run-cosine",
            "ours, run cosine",
            "federated",
            "ours with the inner learning rate decayed over the run: warm-up by the client's own steps, then a "
            "cosine from lr to 0.1 × lr over the seconds since Θ0 as a fraction of the scenario's budget",
            RUN_COSINE,
        ),
        Method(
            "single",
            "single process",
            "single",
            "one process on the union of the data, same token budget",
            {},
        ),
        Method(
            "single-global",
            "single process, global batch",
            "single",
            "one process on the union of the data at the global batch (every client's batch per step), same "
            "token budget, the best learning rate of a recorded sweep (bench/federation/references.py)",
            {},
        ),
        Method(
            "dp-global",
            "data-parallel fp32, global batch",
            "single",
            "synchronous data-parallel fp32 at the global batch: each step one client's batch from each site's "
            "shard, same token budget, the best learning rate of a recorded sweep",
            {},
        ),
        Method(
            "single-run-cosine",
            "single process, run cosine",
            "single",
            "one process on the union of the data, same token budget, the inner learning rate decayed as in "
            "ours-run-cosine over the fraction of its token budget trained",
            RUN_COSINE,
        ),
        _codec("fp32", entropy="none", ef=False),
        _codec("bf16"),
        _codec("int16"),
        _codec("int16", ef=False),
        _codec("int8", ef=False),
        _codec("int8", block=4096),
        _codec("int8", block=4096, ef=False),
        _codec("int16", block=4096),
    )
}


def _sparse(pct: int) -> Method:
    """Ours (today's defaults) with the sparse codec at `pct` % density: issue 16's table."""
    return Method(
        f"ours-sparse{pct}",
        f"ours, sparse {pct}%",
        "federated",
        f"ours with codec sparse: top-{pct}% of every 4096 values, 2-bit, Rice indices, error feedback "
        "β = 1, sparse sum and sparse model stream at the PS",
        {"codec": {"name": "sparse", "sparse_density": pct / 100, "error_feedback": True}},
    )


# The sparse mode's comparison (bench/sparse_bench.py): fp32 DiLoCo, today's default (int8 + Huffman), sparse.
SPARSE_METHODS = ("diloco", "ours", "ours-sparse1", "ours-sparse3", "ours-sparse10")
METHODS.update({m.name: m for m in (_sparse(1), _sparse(3), _sparse(10))})

OURS_METHODS = ("ours", "ours-auto", "ours-codec-auto", "ours-autotune", "ours-eta1", "ours-damped", "ours-buffered")
MAIN_METHODS = ("fedavg", "diloco", "fednova", *OURS_METHODS, "single", "single-global", "dp-global")
# Rate-distortion runs vary the codec of ours at η = 0.5: at η = 1 the global loss swings by more
# between versions than any codec's distortion, so final losses would not resolve a 1% difference.
RATEDIST_BASE = "ours-damped"
RATEDIST_METHODS = (
    "codec-fp32",
    "codec-bf16",
    "codec-int16",
    RATEDIST_BASE,
    "codec-int8-noef",
    "codec-int8-b4096",
    "codec-int8-b4096-noef",
)
OPTIONAL_CODECS = ("codec-int16-noef", "codec-int16-b4096")  # defined, not in the default ~40 min run
# Run twice by `bench/run.py all`, for the noise.
REPEATED_METHODS = ("fedavg", "ours", "ours-auto", "ours-codec-auto", "ours-autotune", "ours-damped")


def base_settings(scenario: Scenario) -> dict[str, Any]:
    """`geofed local`'s defaults, the harness's, then the scenario's own overrides."""
    return merge_settings(merge_settings(LOCAL_DEFAULTS, BENCH_DEFAULTS), scenario.federation)


def get_method(name: str) -> Method:
    """A method by name, or a ScenarioError listing the known ones."""
    if name not in METHODS:
        raise ScenarioError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def federation_for(scenario: Scenario, method: Method) -> FederationConfig:
    """The validated federation settings `method` runs with in `scenario`."""
    base = base_settings(scenario)
    settings = merge_settings(base, method.overrides)
    settings["name"] = f"bench-{method.name}"[:63]
    training = settings.setdefault("training", {})
    if training.get("lr_progress") == "run_time" and not training.get("run_duration_s"):
        training["run_duration_s"] = float(scenario.budget_s)  # the run's time budget, from Θ0 on the PS
    try:
        return FederationConfig.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ScenarioError(f"scenario {scenario.name!r}, method {method.name!r}: {problems}") from None


def _recipes() -> dict[str, Method]:
    from .recipes import CANDIDATES

    return {
        f"recipe-{tag}": Method(f"recipe-{tag}", f"recipe {tag}", "federated", summary, overrides)
        for tag, (summary, overrides) in CANDIDATES.items()
    }


METHODS.update(_recipes())
