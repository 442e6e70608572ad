"""The codec interfaces: `Codec` (encoder side) and `FrameDecoder` (one frame's body to values).

Encoding is two-phase so a multi-GB delta never needs two full fp32 copies: `encode` makes the cheap
global passes (ranges, histogram, residual) eagerly and returns the header, plus a lazy iterator that
quantises and codes one frame at a time. The iterator reads `flat` again, so the caller must keep it
unchanged until the frames are consumed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from geofed import shard_map
from geofed.codec.errors import CodecError
from geofed.codec.header import MAX_FRAME_ELEMS

if TYPE_CHECKING:
    from geofed.codec.sparse_params import SparseParams
    from geofed.codec_specs import CodecSpec

DEFAULT_FRAME_ELEMS = 1 << 20

CODECS: dict[str, type[Codec]] = {}
"""The codec class for each `geofed.codec_specs.CodecSpec` name: a subclass of `Codec` that sets `spec`
enters it by being defined."""


class Codec(ABC):
    """Encodes a flattened fp32 delta into (header, lazy frames); see `geofed.codec` for the contract.

    A codec class names its `spec` once (delta form, splittable, lossless, value bits: the facts the settings,
    the PS and the clients ask instead of comparing names), and defining it registers it in `CODECS`;
    `build` and `from_wire` make one from settings or a header name.
    """

    spec: ClassVar[CodecSpec]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:
            if spec.name in CODECS:
                raise CodecError(f"codec {spec.name!r} has two classes ({CODECS[spec.name].__qualname__}, "
                                 f"{cls.__qualname__})")
            CODECS[spec.name] = cls

    @classmethod
    def build(cls, entropy: str, block_scales: int, sparse: SparseParams | None) -> Codec:
        """This codec from a `geofed.config.CodecConfig`'s entropy, block scales and sparse parameters."""
        return cls()

    @classmethod
    def from_wire(cls, wire: str) -> Codec | None:
        """This codec if `wire` is one of its header names, else None (CodecError for a malformed one)."""
        return cls() if wire == cls.spec.name else None

    @property
    def value_bits(self) -> int | None:
        """Bits per element value on the wire; None when the codec does not send every element."""
        return self.spec.value_bits

    @property
    @abstractmethod
    def name(self) -> str:
        """Wire name, e.g. "int8+huffman", "int8+huffman/b65536", "bf16"."""

    @abstractmethod
    def encode(
        self,
        flat: np.ndarray,
        *,
        frame_elems: int = DEFAULT_FRAME_ELEMS,
        residual_out: np.ndarray | None = None,
        cuts: Sequence[int] = (),
    ) -> tuple[bytes, Iterator[bytes]]:
        """Header and lazy frames of `flat`; fills `residual_out` with flat - decoded(flat) at once.

        `cuts`: element offsets where a frame must end besides the frame_elems grid (a sharded PS's shard
        boundaries, `geofed.shard_map`); empty for a single PS."""

    def __repr__(self) -> str:
        return f"<Codec {self.name}>"


class FrameDecoder(ABC):
    """Turns one frame's body into float32 values; built from the header's codec parameters."""

    @abstractmethod
    def max_body_bytes(self, offset: int, count: int) -> int:
        """Largest body a valid frame of `count` elements at `offset` can have (bomb guard)."""

    @abstractmethod
    def decode(self, offset: int, count: int, body: bytes | memoryview) -> np.ndarray:
        """Exactly `count` float32 values; CodecError if the body is inconsistent."""


def check_encode_args(flat: np.ndarray, frame_elems: int, residual_out: np.ndarray | None) -> None:
    """Reject inputs the encoder would otherwise mis-handle silently."""
    if not isinstance(flat, np.ndarray):
        raise CodecError(f"flat must be a numpy array, got {type(flat).__name__}")
    if flat.ndim != 1 or flat.dtype != np.float32:
        raise CodecError(f"flat must be 1-D float32, got shape {flat.shape} dtype {flat.dtype}")
    if not flat.flags.c_contiguous:
        raise CodecError("flat must be C-contiguous")
    if (
        isinstance(frame_elems, bool)
        or not isinstance(frame_elems, (int, np.integer))
        or not 1 <= frame_elems <= MAX_FRAME_ELEMS
    ):
        raise CodecError(f"frame_elems must be an int in [1, {MAX_FRAME_ELEMS}], got {frame_elems!r}")
    if residual_out is None:
        return
    if not isinstance(residual_out, np.ndarray) or residual_out.shape != flat.shape or residual_out.dtype != np.float32:
        raise CodecError(f"residual_out must be a float32 array of shape {flat.shape}")
    if not residual_out.flags.writeable:
        raise CodecError("residual_out must be writeable")
    if np.may_share_memory(residual_out, flat):
        raise CodecError("residual_out must not overlap flat: the lazy frames re-read flat")


def frame_ranges(numel: int, frame_elems: int, cuts: Sequence[int] = ()) -> Iterator[tuple[int, int]]:
    """[a, b) element ranges of the frames, in stream order (also ended at every cut, see `Codec.encode`)."""
    if cuts:
        yield from shard_map.frame_ranges(numel, frame_elems, cuts)
        return
    for a in range(0, numel, frame_elems):
        yield a, min(numel, a + frame_elems)
