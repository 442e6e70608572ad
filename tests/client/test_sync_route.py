"""The sync path a site takes: slice-wise only where it fits, otherwise the whole-vector path, with a reason."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from client_agent.connection.link_tuner import CODEC_POLICIES, FixedCodec
from client_agent.paradigms import client_paradigm
from client_agent.paradigms.pretrain import Pretrain
from client_agent.sync import SliceWiseSync, WholeVectorSync, sync_route
from geofed.codec import CodecError, make_codec
from geofed.codec.sharded import SliceCodec
from geofed.codec.sparse_params import SparseParams
from geofed.config import CodecConfig, FederationConfig
from geofed.paradigms import ParadigmSettings


def shard_route(world: int, paradigm: str, codec: str, sharded_checkpoint: bool = False):
    """The route for paradigm and codec names, as the site asks it (the codec's per-round candidates)."""
    settings = FederationConfig.model_validate({"paradigm": {"name": paradigm}}).paradigm
    codecs = CODEC_POLICIES.get(codec, FixedCodec)(codec).candidates
    return sync_route(world, client_paradigm(settings), codecs, sharded_checkpoint)


class _Alone:
    def max(self, values):
        return values

    def sum(self, values):
        return values


def _codec(name: str):
    return make_codec(name, sparse=SparseParams(16, 3, 2, "fixed") if name == "sparse" else None)


@pytest.mark.parametrize("name", [n for n in CodecConfig.model_fields["name"].annotation.__args__ if n != "auto"])
def test_route_matches_what_the_slice_encoder_can_do(name):
    """The reference is the encoder itself: where the route says slice-wise, a whole-vector slice encodes to
    the one-rank stream byte for byte; where it says no, `SliceCodec` refuses the codec."""
    route = shard_route(2, "pretrain", name)
    codec = _codec(name)
    if not route.slice_wise:
        assert name in route.reason and "no slice-wise encoder" in route.reason
        with pytest.raises(CodecError, match="no slice-wise encoder"):
            SliceCodec(codec, 0, 10, _Alone())
        return
    x = np.random.default_rng(0).standard_normal(3000).astype(np.float32)
    h1, f1 = codec.encode(x, frame_elems=1000)
    h2, f2 = SliceCodec(codec, 0, x.size, _Alone()).encode(x, frame_elems=1000)
    assert (h2, list(f2)) == (h1, list(f1))


def test_sparse_falls_back_and_auto_goes_slice_wise():
    assert not shard_route(4, "pretrain", "sparse").slice_wise
    assert shard_route(4, "bitfit", "auto").slice_wise


@pytest.mark.parametrize("paradigm", ["lora", "zo", "fsl-sage"])
def test_small_vector_paradigms_keep_the_whole_vector_path(paradigm):
    route = shard_route(2, paradigm, "int8")
    assert not route.slice_wise and repr(paradigm) in route.reason
    assert route.path is WholeVectorSync


def test_one_rank_keeps_the_whole_vector_path_unless_it_resumes_a_sharded_checkpoint():
    one = shard_route(1, "pretrain", "int8")
    assert not one.slice_wise and "one rank" in one.reason
    resuming = shard_route(1, "pretrain", "int8", sharded_checkpoint=True)
    assert resuming.slice_wise and "sharded checkpoint" in resuming.reason and resuming.path is SliceWiseSync
    assert not shard_route(1, "lora", "int8", sharded_checkpoint=True).slice_wise


class _OwnVectorSettings(ParadigmSettings):
    """Settings no list knows that do not declare `elementwise`."""

    name: Literal["own-vector"] = "own-vector"


def test_whether_a_client_half_exchanges_element_by_element_is_its_settings_declaration():
    """One declaration: pretraining's client half, under settings that do not declare it, keeps the whole
    vector."""
    route = sync_route(2, Pretrain(_OwnVectorSettings()), ["int8"])
    assert route.path is WholeVectorSync and "'own-vector' exchanges its own small vector" in route.reason
