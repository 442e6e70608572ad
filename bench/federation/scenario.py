"""What one benchmark scenario is: the clients (compute slowdown, micro-batch, WAN link) and the time budget.

Paper §I and §III-C2: edge sites differ in GPU speed and memory, and their links to the cloud PS are
slow, jittery, asymmetric and break. A scenario pins those down so every method meets the same
conditions in the same run. Links use the `LinkProfile` shorthand ('20ms/5ms/2MBps/8MBps,blackhole@60s+15s');
outage times count from t = 0, the moment the master's Θ0 reaches the PS, not from process start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from geofed_apps.wan.profile import LinkProfile


class ScenarioError(ValueError):
    """A scenario that cannot be run as written; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClientSpec(_Strict):
    """One emulated site: how slow its accelerator is, its micro-batch, and its link to the PS."""

    slowdown: float = Field(
        1.0, ge=1.0, le=100.0, description="Compute slowdown factor (the agent's --slowdown)."
    )
    micro_batch: int = Field(
        0, ge=0, le=1 << 16, description="Sequences per forward pass; 0 = the device default."
    )
    link: str = Field(
        "0ms", description="LinkProfile shorthand of the client↔PS link; '0ms' = plain loopback."
    )

    @field_validator("link")
    @classmethod
    def _link_parses(cls, text: str) -> str:
        LinkProfile.parse(
            text
        )  # ValueError with the offending part, re-raised by pydantic with the field path
        return text

    def profile(self, seed: int) -> LinkProfile:
        """The link without its outages (the harness fires those itself, timed from t = 0), jitter seeded."""
        return LinkProfile.parse(self.link).model_copy(update={"outages": (), "seed": seed})

    def outages(self) -> list[tuple[float, str, float]]:
        """(at_s, kind, duration_s) of this link's scripted outages, in time order."""
        return sorted((o.at_s, o.kind, o.duration_s) for o in LinkProfile.parse(self.link).outages)


class Scenario(_Strict):
    """A federation to benchmark every method on: N clients, a wall-clock budget, checkpoints to report."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    clients: tuple[ClientSpec, ...] = Field(min_length=1, max_length=16)
    budget_s: float = Field(gt=0, le=3600, description="Wall-clock seconds of training after t = 0.")
    report_at_s: tuple[float, ...] = Field(
        (), description="Wall-clock checkpoints of the table; default quarters."
    )
    target_loss: float | None = Field(
        None,
        gt=0,
        description="Absolute target eval loss; None = the best loss sync FedAvg reaches in the budget.",
    )
    federation: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the bench's base federation settings (model, training...).",
    )
    data_seed: int = Field(0, description="Seed of the non-IID split of the stdlib corpus by module.")
    max_evals: int = Field(
        150, ge=2, le=10_000, description="Most global versions evaluated per run (thinned)."
    )

    @model_validator(mode="after")
    def _checkpoints_inside_budget(self) -> Scenario:
        late = [t for t in self.report_at_s if not 0 < t <= self.budget_s]
        if late:
            raise ValueError(f"report_at_s {late} must lie in (0, budget_s={self.budget_s}]")
        for i, c in enumerate(self.clients):
            for at_s, _, duration_s in c.outages():
                if at_s + duration_s > self.budget_s:
                    raise ValueError(
                        f"client {i}: outage at {at_s}s+{duration_s}s ends after budget_s {self.budget_s}"
                    )
        return self

    @property
    def checkpoints(self) -> tuple[float, ...]:
        """The table's wall-clock columns: `report_at_s`, or the four quarters of the budget."""
        if self.report_at_s:
            return tuple(sorted(self.report_at_s))
        return tuple(round(self.budget_s * q / 4, 3) for q in (1, 2, 3, 4))


def parse_scenario(data: dict[str, Any]) -> Scenario:
    """Validate a scenario mapping; one readable ScenarioError line per problem."""
    if not isinstance(data, dict):
        raise ScenarioError(f"a scenario must be a mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'scenario'}: {err['msg']}" for err in exc.errors()
        )
        raise ScenarioError(f"invalid scenario {data.get('name', '?')!r}: {problems}") from None


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a YAML file of one."""
    from .scenarios import BUILTIN

    if name_or_path in BUILTIN:
        return parse_scenario(BUILTIN[name_or_path])
    path = Path(name_or_path)
    if not path.is_file():
        raise ScenarioError(
            f"no built-in scenario {name_or_path!r} (known: {', '.join(BUILTIN)}) and no such file"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML ({exc})") from None
    return parse_scenario(data)
