"""Which path a site's sync takes (issue 18): shard-wise, or today's gather-on-rank-0, and why.

Shard-wise (`flat_shards`, `shard_push`, `shard_checkpoint`) keeps every rank at O(model / ranks): each
rank diffs, error-corrects and encodes its own slice, and rank 0 relays the frames (paper §III: the site
is an FSDP worker group behind one connection). It only pays, and only fits, when
- the site has more than one rank (one rank would hold the whole vector either way), or its checkpoint
  was written shard-wise (a site relaunched on one rank restores it, as on any other rank count);
- the paradigm exchanges the model itself (pretrain, bitfit): the others exchange small vectors
  (adapters, seeds, cut-layer tensors) through their own `delta`/`adopt`, which the slices do not model;
- the codec has a shard-wise encoder (`SliceCodec`: fp32, bf16, int8, int16; 'auto' picks among them);
A sharded PS is served too: each rank's frames also end at the PS's shard bounds inside its slice
(`SliceCodec` with `cuts`; a slice starts on the frame grid, so the frames are the one-rank stream's).
Anything else keeps today's path, which works for all of them; the reason is logged, never silent.
"""

from __future__ import annotations

from dataclasses import dataclass

from geofed.codec import make_codec
from geofed.codec.errors import CodecError
from geofed.codec.sharded import SliceCodec

SHARD_WISE_PARADIGMS = ("pretrain", "bitfit")
# What the federation's codec name can resolve to in a round ('auto' switches by link rate, §III-B3).
_RESOLVES_TO = {"auto": ("int8", "int16")}


@dataclass(frozen=True)
class Route:
    shard_wise: bool
    reason: str


class _NoAgreement:
    """Construction only: a `SliceCodec` built to ask whether the codec has a shard-wise encoder."""

    def max(self, values):  # pragma: no cover - never called
        raise AssertionError("not for encoding")

    sum = max


def _shard_wise_codec(name: str) -> str | None:
    """Why `name` has no shard-wise encoder, or None; asks `SliceCodec` itself rather than keeping a list."""
    for resolved in _RESOLVES_TO.get(name, (name,)):
        if resolved == "sparse":
            return "codec 'sparse' has no shard-wise encoder (its chunks' top-k are not split by rank)"
        try:
            SliceCodec(make_codec(resolved), 0, 0, _NoAgreement())
        except CodecError as exc:
            return str(exc)
    return None


def shard_route(world: int, paradigm: str, codec: str, sharded_checkpoint: bool = False) -> Route:
    """The path for a site of `world` ranks running `paradigm` with the federation's `codec` name.

    `sharded_checkpoint`: the site's newest checkpoint was written shard-wise (it ran on several ranks); a
    single rank then keeps the shard-wise path too, which on one rank is the whole vector and reads it."""
    if world <= 1 and not sharded_checkpoint:
        return Route(False, "one rank: it holds the whole vector either way")
    if paradigm not in SHARD_WISE_PARADIGMS:
        return Route(False, f"paradigm {paradigm!r} exchanges its own small vector; shard-wise covers "
                            f"{', '.join(SHARD_WISE_PARADIGMS)}")
    if (why := _shard_wise_codec(codec)) is not None:
        return Route(False, why)
    if world <= 1:
        return Route(True, "one rank resuming a sharded checkpoint (written on several ranks)")
    return Route(True, f"{world} ranks each encode their slice")
