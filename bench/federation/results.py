"""What one benchmark run produced, as plain JSON: the loss curve, per-client wire and time accounting.

Results are committed under `bench/results/<scenario>/` so the tables and plots in docs/benchmarks.md
can be rebuilt (`python bench/run.py report`) without re-running minutes of training.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


@dataclass(frozen=True)
class CurvePoint:
    """The global model's held-out eval loss at `t` seconds after Θ0 reached the PS."""

    t: float
    version: int
    loss: float
    tokens: int
    """Training tokens behind the model by then (federated: in pushed deltas; single: trained)."""


@dataclass(frozen=True)
class ClientResult:
    """One client's run: bytes its link carried (proxy counters), its syncs and where its time went."""

    client: str
    slowdown: float
    micro_batch: int
    link: str
    bytes_up: int
    bytes_down: int
    syncs: int
    statuses: dict[str, int]
    payload_bytes: int
    """Encoded delta bytes pushed (the codec's output; the wire adds gRPC framing)."""
    tokens: int
    train_s: float
    push_s: float
    idle_s: float
    codecs: list[str]
    exit_code: int | None

    @property
    def accounted_s(self) -> float:
        """Seconds covered by its sync records: training, pushing, waiting for the next model."""
        return self.train_s + self.push_s + self.idle_s


@dataclass(frozen=True)
class RunResult:
    """One method in one scenario (one repeat)."""

    scenario: str
    method: str
    kind: str
    budget_s: float
    numel: int
    curve: list[CurvePoint]
    clients: list[ClientResult] = field(default_factory=list)
    repeat: int = 1
    started_at: str = ""
    load_avg_1m: float | None = None
    """The machine's 1-minute load average when the run started (the cores are shared: noise)."""
    notes: list[str] = field(default_factory=list)
    cpu_share: float | None = None
    """CPUs each client and the PS were capped at, each in its own cgroup; None: they shared the cores."""

    @property
    def tokens(self) -> int:
        """Total training tokens behind the final model."""
        return self.curve[-1].tokens if self.curve else 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        raw = json.loads(text)
        raw["curve"] = [CurvePoint(**p) for p in raw["curve"]]
        raw["clients"] = [ClientResult(**c) for c in raw["clients"]]
        return cls(**raw)


def result_path(scenario: str, method: str, repeat: int = 1, root: Path = RESULTS_DIR) -> Path:
    """bench/results/<scenario>/<method>.json; repeats beyond the first get `.r<N>`."""
    suffix = "" if repeat == 1 else f".r{repeat}"
    return root / scenario / f"{method}{suffix}.json"


def save(result: RunResult, root: Path = RESULTS_DIR) -> Path:
    path = result_path(result.scenario, result.method, result.repeat, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json() + "\n", encoding="utf-8")
    return path


def load_all(scenario: str, root: Path = RESULTS_DIR) -> list[RunResult]:
    """Every saved run of `scenario`, sorted by method then repeat."""
    folder = root / scenario
    if not folder.is_dir():
        return []
    runs = [RunResult.from_json(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    return sorted(runs, key=lambda r: (r.method, r.repeat))
