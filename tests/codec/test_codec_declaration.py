"""A codec is one class that declares its facts: `Fp16Codec`, defined in a test-support file and imported here,
is a codec the registry builds, the header names and the PS and client questions (value bits, first model,
slice-wise) answer for, with no edit anywhere else."""

from __future__ import annotations

import numpy as np
import pytest

from client_agent.sync.route import _slice_wise_codec
from geofed.codec import CodecError, decoder_for, make_codec
from geofed.codec.base import CODECS
from geofed.codec.registry import codec_class, codec_from_wire_name
from geofed.codec_specs import CODEC_SPECS, CodecSpec
from ps_server.errors import InvalidPush, check_first_model_codec
from ps_server.metrics import value_bits
from tests.plugins.fp16_codec import Fp16Codec


def test_a_declared_codec_round_trips_through_the_registry_and_its_header():
    x = np.random.default_rng(0).standard_normal(2500).astype(np.float32)
    header, frames = make_codec("fp16").encode(x, frame_elems=1000)
    dec = decoder_for(header, max_numel=x.size)
    out = np.empty_like(x)
    for frame in frames:
        for offset, values in dec.feed(frame):
            out[offset:offset + values.size] = values
    dec.finish()
    np.testing.assert_array_equal(out, x.astype(np.float16).astype(np.float32))
    assert isinstance(codec_from_wire_name("fp16"), Fp16Codec) and codec_class("fp16") is Fp16Codec


def test_the_ps_and_the_client_ask_the_codecs_facts():
    assert value_bits("fp16") == 16 and value_bits("int8+huffman/b4096") == 8 and value_bits("sparse") is None
    assert not decoder_for(make_codec("fp16").encode(np.zeros(4, np.float32))[0], max_numel=4).lossless
    with pytest.raises(InvalidPush, match="initial model"):
        check_first_model_codec(codec_from_wire_name("fp16").spec.lossless)
    assert _slice_wise_codec(["int8", "fp16"]) == "codec 'fp16' has no slice-wise encoder"
    assert _slice_wise_codec(["int8", "int16", "bf16", "fp32"]) is None


def test_a_name_is_declared_once():
    with pytest.raises(CodecError, match="two classes"):
        type("Again", (Fp16Codec,), {"spec": Fp16Codec.spec})
    with pytest.raises(ValueError, match="declared twice"):
        CodecSpec("fp16")
    assert CODECS["fp16"] is Fp16Codec and CODEC_SPECS["fp16"] is Fp16Codec.spec


def test_an_unknown_name_says_which_are_known():
    with pytest.raises(CodecError, match=r"unknown codec 'int4'; known: fp32, bf16, int8, int16, sparse"):
        make_codec("int4")
