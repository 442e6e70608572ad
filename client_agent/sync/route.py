"""Which sync path a site takes: slice-wise (`SliceWiseSync`) or whole-vector (`WholeVectorSync`), and why.

Slice-wise keeps every rank at O(model / ranks): each rank diffs, error-corrects and encodes its own slice,
and rank 0 relays the frames (paper §III: the site is an FSDP worker group behind one connection). It only
pays, and only fits, when
- the site has more than one rank (one rank would hold the whole vector either way), or its checkpoint
  was written slice-wise (a site relaunched on one rank restores it, as on any other rank count);
- the paradigm exchanges parameters element by element (`ClientParadigm.elementwise`): the others exchange
  small vectors (adapters, seeds, cut-layer tensors) through their own `delta`/`adopt`, which the slices
  do not model;
- every codec the round can choose declares a slice-wise encoder (`CodecSpec.splittable`: fp32, bf16, int8, int16).
A sharded PS is served too: each rank's frames also end at the PS's shard bounds inside its slice
(`SliceCodec` with `cuts`; a slice starts on the frame grid, so the frames are the one-rank stream's).
Anything else takes the whole-vector path, which works for all of them; the reason is logged, never silent.

`training.overlap_sync` asks for the overlapped path (`OverlapSync`: the send and the wait for the next
model beside the next round); it serves one rank and the element-by-element paradigms, with every codec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from geofed.codec_specs import codec_spec
from geofed.config import AggregationConfig

from ..paradigms import ClientParadigm
from .base import SyncPath
from .overlap import OverlapSync
from .sliced import SliceWiseSync
from .whole import WholeVectorSync


@dataclass(frozen=True)
class Route:
    path: type[SyncPath]
    reason: str

    @property
    def slice_wise(self) -> bool:
        return self.path.slices_only


def _slice_wise_codec(names: Sequence[str]) -> str | None:
    """Why one of `names` has no slice-wise encoder, or None; asks each codec's declared facts."""
    for name in names:
        codec = codec_spec(name)
        if codec.delta_form != "dense":  # e.g. chunk-wise top-k: a chunk's k is not split by rank
            return f"codec {name!r} pushes {codec.delta_form} deltas, which have no slice-wise encoder"
        if not codec.splittable:
            return f"codec {name!r} has no slice-wise encoder"
    return None


def overlap_kept_off(agg: AggregationConfig) -> str | None:
    """Why the federation's aggregation settings keep every site off the overlapped path, or None."""
    if agg.outer_momentum:
        return "the outer step carries momentum, and a round trained one transfer behind adds to it (it overshoots)"
    if agg.mode == "auto":
        return "aggregation.mode auto times each client's rounds at the PS as a round-by-round client runs them"
    return None


def sync_route(
    world: int,
    paradigm: ClientParadigm,
    codecs: Sequence[str],
    sharded_checkpoint: bool = False,
    overlap: bool = False,
    kept_off: str | None = None,
) -> Route:
    """The path for a site of `world` ranks running `paradigm`, whose rounds choose among `codecs`
    (`LinkTuner.codec_policy.candidates`).

    `sharded_checkpoint`: the site's newest checkpoint was written slice-wise (it ran on several ranks); a
    single rank then keeps the slice-wise path too, which on one rank is the whole vector and reads it.
    `overlap`: `training.overlap_sync` asks for the overlapped path; `kept_off`: why the federation's settings
    keep every site off it (`overlap_kept_off`), or None."""
    route = _round_by_round(world, paradigm, codecs, sharded_checkpoint)
    if not overlap:
        return route
    if kept_off is not None:
        return Route(route.path, f"overlap_sync not taken: {kept_off}; {route.reason}")
    if world > 1:
        return Route(route.path, f"overlap_sync not taken: the overlapped path runs on one rank; {route.reason}")
    if route.path is not WholeVectorSync:
        return Route(route.path, f"overlap_sync not taken: the overlapped path holds the whole vector; {route.reason}")
    if not paradigm.elementwise:
        return Route(
            route.path,
            f"overlap_sync not taken: paradigm {paradigm.name!r} exchanges its own small vector; the fold of a "
            "newer model is an element-by-element sum",
        )
    return Route(OverlapSync, "one rank, overlap_sync: the send and the next model overlap the next round")


def _round_by_round(world: int, paradigm: ClientParadigm, codecs: Sequence[str], sharded_checkpoint: bool) -> Route:
    if world <= 1 and not sharded_checkpoint:
        return Route(WholeVectorSync, "one rank: it holds the whole vector either way")
    if not paradigm.elementwise:
        return Route(
            WholeVectorSync,
            f"paradigm {paradigm.name!r} exchanges its own small vector; slice-wise "
            "covers paradigms that exchange parameters element by element",
        )
    if (why := _slice_wise_codec(codecs)) is not None:
        return Route(WholeVectorSync, why)
    if world <= 1:
        return Route(SliceWiseSync, "one rank resuming a sharded checkpoint (written on several ranks)")
    return Route(SliceWiseSync, f"{world} ranks each encode their slice")
