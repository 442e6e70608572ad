"""Federation settings: the one source of truth.

The CLI flags, the PS configuration, the CRD schemas (`crds/`) and the Helm values schema are all
derived from these pydantic models (see `geofed.schema_gen`); tests keep the generated files current.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Section(BaseModel):
    """Base for every settings section: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(_Section):
    """The causal language model every client trains (built from config, random init for pretraining)."""

    family: Literal["gpt2", "llama"] = Field("gpt2", description="Model family built with transformers.")
    path: str | None = Field(
        None, description="Local checkpoint directory to load instead of building from config (no downloads)."
    )
    n_layer: int = Field(2, ge=1, le=128, description="Number of transformer blocks.")
    n_head: int = Field(4, ge=1, le=128, description="Attention heads per block.")
    n_embd: int = Field(128, ge=8, le=16384, description="Hidden size; must be divisible by n_head.")
    vocab_size: int = Field(
        257, ge=2, le=1_000_000, description="Vocabulary size; 257 for the built-in byte tokenizer (256 + EOS)."
    )
    block_size: int = Field(128, ge=8, le=131072, description="Context length in tokens.")
    seed: int = Field(0, description="Seed for the master client's random initialisation of the model.")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        return self


class CodecConfig(_Section):
    """How deltas are compressed on the wire (paper §III-B3: flattened min-max quantisation + Huffman)."""

    name: Literal["fp32", "bf16", "int8", "int16", "auto"] = Field(
        "auto",
        description="Delta codec; 'auto' picks int8 or int16 from the measured link rate and sync_time_budget_s.",
    )
    entropy: Literal["huffman", "ans", "none"] = Field(
        "huffman", description="Entropy stage after quantisation: canonical Huffman (paper), rANS, or none."
    )
    block_scales: int = Field(
        0,
        ge=0,
        le=1 << 24,
        description="Elements per min-max block (0, or 64 and more); 0 = one global min/max over the flattened "
        "delta (paper).",
    )
    error_feedback: bool = Field(
        True, description="Carry each client's quantisation residual into its next delta (EF-SGD style)."
    )
    sync_time_budget_s: float = Field(
        60.0, gt=0, description="Seconds a push may take on the measured link before 'auto' drops to int8."
    )


    @model_validator(mode="after")
    def _block_scales_range(self) -> CodecConfig:
        if 0 < self.block_scales < 64:
            raise ValueError(f"block_scales must be 0 or at least 64, got {self.block_scales}")
        return self


class AggregationConfig(_Section):
    """How the PS folds deltas into the global model (Algorithm 1, step 13, and better)."""

    mode: Literal["sync", "async"] = Field(
        "async", description="sync: rounds with quorum and straggler timeout; async: buffered, staleness-aware."
    )
    outer_optimizer: Literal["fedavg", "nesterov", "adam"] = Field(
        "fedavg", description="Outer step on the averaged delta: FedAvg with global LR, DiLoCo Nesterov, FedAdam."
    )
    global_lr: float = Field(
        0.5,
        gt=0,
        le=10,
        description="Global (outer) learning rate η; 0.5 suits the default asynchronous K = 1 (FedAsync-style "
        "mixing; measured in docs/benchmarks.md), 1 is plain FedAvg.",
    )
    momentum: float = Field(0.9, ge=0, lt=1, description="Nesterov momentum μ of the outer optimizer.")
    beta1: float = Field(0.9, ge=0, lt=1, description="Adam β1 of the outer optimizer.")
    beta2: float = Field(0.99, ge=0, lt=1, description="Adam β2 of the outer optimizer.")
    adam_eps: float = Field(1e-3, gt=0, description="Adam ε (FedOpt's τ); larger than usual for stability.")
    weighting: Literal["tokens", "uniform"] = Field(
        "tokens", description="Weight each delta by the tokens behind it, or equally."
    )
    fednova: bool = Field(
        False, description="FedNova normalisation: divide each delta by its local step count, rescale by the mean."
    )
    quorum: float = Field(
        1.0, gt=0, le=1, description="sync: fraction of active clients whose deltas close a round early."
    )
    straggler_timeout_s: float = Field(
        120.0, gt=0, description="sync: seconds after a round's first delta before it closes with what arrived (T)."
    )
    late_policy: Literal["accept", "stale"] = Field(
        "stale", description="sync: a late delta is taken as-is ('accept') or down-weighted by staleness."
    )
    buffer_size: int = Field(1, ge=1, le=4096, description="async: deltas buffered before an outer step (K).")
    buffer_timeout_s: float = Field(
        30.0, gt=0, description="async: seconds after the first buffered delta before an outer step anyway."
    )
    max_staleness: int = Field(
        8, ge=0, le=1_000_000, description="Deltas computed against a version older than this are refused."
    )
    staleness_exponent: float = Field(
        0.5, ge=0, le=8, description="Staleness weight (1 + s) ** -a for a delta s versions behind."
    )
    robust: Literal["none", "median", "trimmed_mean"] = Field(
        "none", description="Byzantine-robust combination of a round's deltas instead of the weighted mean."
    )
    trim_fraction: float = Field(0.1, ge=0, lt=0.5, description="trimmed_mean: fraction cut at each end.")
    clip_norm: float = Field(0.0, ge=0, description="Clip each client's delta to this L2 norm; 0 disables.")


class TrainingConfig(_Section):
    """Client-side training: inner optimizer, batch and cadence (Algorithm 1, local loop)."""

    lr: float = Field(1e-3, gt=0, le=1, description="Inner AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, le=1, description="Inner AdamW weight decay.")
    warmup_steps: int = Field(20, ge=0, description="Linear warm-up steps of the inner learning rate.")
    batch_size: int = Field(
        16, ge=1, le=1 << 20, description="Effective batch in sequences per step, equal on every client (§III-C2)."
    )
    micro_batch_size: int = Field(
        0, ge=0, le=1 << 20, description="Sequences per forward pass; 0 picks the largest that fits the device."
    )
    local_steps: int = Field(50, ge=1, description="H: local steps between syncs.")
    sync_interval_s: float = Field(
        60.0, gt=0, description="T: wall-clock seconds between syncs; whichever of H and T comes first."
    )
    max_steps: int = Field(0, ge=0, description="Stop after this many local steps in total; 0 = no limit.")
    eval_every: int = Field(100, ge=1, description="Evaluate (and feed the top-k checkpoint manager) every N steps.")
    eval_batches: int = Field(4, ge=1, description="Batches of held-out data per evaluation.")
    keep_best: int = Field(10, ge=1, le=1000, description="Checkpoints kept by lowest eval loss (§III-B4).")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="Mixed precision; auto = bf16 where supported, fp16 + grad scaler, else fp32."
    )


class FederationConfig(_Section):
    """What every member of one federation agrees on; the PS hands it to clients at Join."""

    name: str = Field("default", min_length=1, max_length=63, description="Federation name.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The model being trained.")
    aggregation: AggregationConfig = Field(default_factory=AggregationConfig, description="PS aggregation.")
    codec: CodecConfig = Field(default_factory=CodecConfig, description="Delta compression.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="Client training.")
    paradigm: Literal["pretrain"] = Field(
        "pretrain", description="Which parameters are trained and exchanged (Algorithm 1, steps 3 and 13)."
    )


class ServerConfig(_Section):
    """The parameter server process: network, security, durability, limits."""

    host: str = Field("0.0.0.0", description="Address to bind.")
    port: int = Field(
        7443, ge=0, le=65535, description="The one fixed gRPC port clients dial out to (0: any free port, for tests)."
    )
    metrics_port: int = Field(9090, ge=0, le=65535, description="Prometheus metrics HTTP port; 0 disables.")
    insecure: bool = Field(False, description="Serve plaintext gRPC; for local use only.")
    tls_cert: str | None = Field(None, description="PEM server certificate file.")
    tls_key: str | None = Field(None, description="PEM server private key file.")
    client_ca: str | None = Field(None, description="PEM CA bundle; when set, clients must present certs (mTLS).")
    checkpoint_dir: str = Field("./ps-checkpoints", description="Directory for atomic PS checkpoints.")
    checkpoint_every: int = Field(1, ge=1, description="Checkpoint every N new global versions (and on SIGTERM).")
    keep_checkpoints: int = Field(3, ge=1, description="Checkpoint files kept.")
    admin_token_file: str | None = Field(
        None, description="File holding the admin credential; generated (mode 0600) when missing."
    )
    max_upload_bytes: int = Field(
        8 << 30, ge=1024, description="Largest encoded delta accepted, in bytes; larger pushes are refused."
    )
    chunk_bytes: int = Field(2 << 20, ge=4096, le=4 << 20, description="Bytes per streamed model chunk.")
    session_ttl_s: float = Field(300.0, gt=0, description="Session credential lifetime, renewed by heartbeat.")
    token_ttl_s: float = Field(3600.0, gt=0, description="Default lifetime of a minted one-time token.")
    client_timeout_s: float = Field(
        180.0, gt=0, description="A client silent this long counts as gone for sync-round quorum."
    )
    rate_limit_per_s: float = Field(20.0, gt=0, description="Requests per second allowed per client (burst 2x).")
    bind_sessions: bool = Field(
        True,
        description="A session only works from the connection that joined (turn off behind an L7 proxy that "
        "spreads one client over several upstream connections).",
    )


class ClientConfig(_Section):
    """One client agent process (a site's Job, or one process of `geofed local`)."""

    ps: str = Field("127.0.0.1:7443", description="Parameter server address host:port (dialled out to).")
    client_id: str = Field(..., min_length=1, max_length=253, description="Stable id, e.g. '<site>.<name>'.")
    token_file: str | None = Field(
        None, description="File holding the one-time join token; else the GEOFED_TOKEN environment variable."
    )
    data: str = Field(..., description="Private data: a directory of .txt/.jsonl/.bin files, or a .list file.")
    tokenizer: str | None = Field(None, description="Local Hugging Face tokenizer directory; default byte-level.")
    work_dir: str = Field("./geofed-client", description="Checkpoints, metrics.jsonl and the rejoin token.")
    insecure: bool = Field(False, description="Plaintext gRPC; for local use only.")
    ca: str | None = Field(None, description="PEM CA of the PS certificate (default: system roots).")
    cert: str | None = Field(None, description="PEM client certificate for mTLS.")
    key: str | None = Field(None, description="PEM client key for mTLS.")
    device: str = Field("auto", description="torch device: auto, cpu, cuda, cuda:N.")
    slowdown: float = Field(1.0, ge=1.0, le=100.0, description="Emulate a slower GPU by this factor (demos).")
    micro_batch_size: int = Field(
        0, ge=0, le=1 << 20, description="This site's micro-batch; 0 = the federation's setting (0 there = auto)."
    )
    max_rounds: int = Field(0, ge=0, description="Stop after this many syncs; 0 = no limit.")
    duration_s: float = Field(0.0, ge=0, description="Stop after this many seconds; 0 = no limit.")
    seed: int = Field(0, description="Seed of this client's data order.")
    join_timeout_s: float = Field(120.0, gt=0, description="Give up joining an unreachable PS after this long.")
    retry_budget_s: float = Field(
        600.0, gt=0, description="Keep retransmitting a failed push this long (a PS outage) before giving up."
    )
