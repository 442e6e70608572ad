"""Multi-PS settings (paper §III-B1c): PS groups, each with its own PS, combined by ring all-reduce.

A federation may declare several groups (for example one per region). Every client names its group and
dials that group's PS; each PS runs Algorithm 1 for its own clients, and the PSs combine their round
sums with one another by a ring all-reduce between a round's close and its apply, so that every PS
publishes the same version with the same model. No groups (the default) is the single-PS federation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from geofed.settings_base import Section

GROUP_NAME = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"


class PSGroup(Section):
    """One group of clients and the PS that serves them."""

    name: str = Field(..., pattern=GROUP_NAME, description="Group name (a DNS label, e.g. a region: 'us-east').")
    address: str = Field(
        "",
        max_length=253,
        description="host:port the other PSs dial this group's PS at (PS-to-PS links stay inside the cloud); "
        "empty: '<federation>-ps-<group>:7443', the Service the operator creates for the group.",
    )


class RingConfig(Section):
    """How the groups' PSs combine each round by ring all-reduce."""

    timeout_s: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="A ring partner silent this long (a dead or stalled PS) is excluded and the ring retried "
        "without it. Must exceed the skew between the groups' round closes plus one chunk's transfer time.",
    )
    retries: int = Field(
        2, ge=0, le=16, description="Ring attempts without excluded partners before a round is dropped."
    )
    codec: Literal["fp32", "bf16", "int8", "int16"] = Field(
        "int16",
        description="Compression of the chunks PSs exchange: min-max quantisation (+ Huffman) of each chunk; "
        "every PS ends with the same bits whatever the codec (each chunk's owner spreads its decoded values).",
    )
    min_interval_s: float = Field(
        0.0,
        ge=0,
        le=86400,
        description="Cadence: a PS holds its closed-round criteria open until this long after the previous "
        "all-reduce (its clients' deltas keep accumulating), so a busy group does not ring on every delta.",
    )


def check_groups(groups: list[PSGroup]) -> None:
    """Refuse (ValueError) a group list with repeated names."""
    names = [g.name for g in groups]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"PS group names must be unique; repeated: {', '.join(dupes)}")


def group_address(federation: str, group: PSGroup) -> str:
    """Where the other PSs reach `group`'s PS."""
    return group.address or f"{federation}-ps-{group.name}:7443"


def check_group(groups: list[PSGroup], name: str | None) -> str | None:
    """Why `name` is not a group of this federation (None: it is, or the federation has no groups)."""
    if not groups or not name:
        return None
    known = [g.name for g in groups]
    if name not in known:
        return f"unknown PS group {name!r}; this federation's groups are: {', '.join(known)}"
    return None
