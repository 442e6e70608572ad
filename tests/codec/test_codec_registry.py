"""make_codec / decoder_for: every settings combination round-trips and names itself on the wire."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from geofed.codec import Codec, StreamDecoder, decoder_for, make_codec
from geofed.codec.registry import codec_from_wire_name

from .conftest import heavy_tailed, roundtrip

COMBOS = list(itertools.product(["int8", "int16"], ["huffman", "ans", "none"], [0, 64, 65536]))
X = heavy_tailed(30_001, seed=4)


@pytest.mark.parametrize("name, entropy, block", COMBOS)
def test_quantised_codecs_round_trip(name: str, entropy: str, block: int) -> None:
    codec = make_codec(name, entropy, block)
    assert isinstance(codec, Codec)
    out, header, payload = roundtrip(codec, X, frame_elems=7000)
    rel = np.linalg.norm(out - X) / np.linalg.norm(X)
    assert rel < (0.1 if name == "int8" else 1e-3)
    assert codec_from_wire_name(codec.name).name == codec.name
    expected = f"{name}+{entropy}" + (f"/b{block}" if block else "")
    assert codec.name == expected


def test_entropy_stages_agree_on_symbols() -> None:
    """Huffman, ANS and raw decode to identical values: only the coding of the symbols differs."""
    outs = [roundtrip(make_codec("int16", e, 64), X)[0] for e in ("huffman", "ans", "none")]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def test_entropy_coding_shrinks_heavy_tailed_symbols() -> None:
    sizes = {e: len(roundtrip(make_codec("int8", e), X)[2]) for e in ("huffman", "ans", "none")}
    assert sizes["ans"] < sizes["huffman"] < 0.6 * sizes["none"]


def test_decoder_type_and_fields() -> None:
    header, _ = make_codec("int8", "ans").encode(X, frame_elems=5000)
    dec = decoder_for(header, max_numel=X.size)
    assert isinstance(dec, StreamDecoder)
    assert (dec.numel, dec.codec_name, dec.frame_elems) == (X.size, "int8+ans", 5000)
