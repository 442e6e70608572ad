"""Slice-wise push, downlink and checkpoints across gloo ranks (issue 18, client side).

`client_slices_worker.py` runs as torchrun ranks: each pushes its own slice of δ through error
feedback and the codec, rank 0 relays all frames, and the stream is decoded with the PS's decoder.
The reference is the test's own: δ = θ_local − θ_base flattened by the worker with `torch.cat`, encoded
in one piece by the one-rank path. Checkpoints written on 2 ranks are restored on 1 (in this process)
and on 3 ranks (slow), model, AdamW state and residual compared in full.
"""

from __future__ import annotations

import client_slices_worker as worker
import numpy as np
import pytest
import torch
from torchrun_launch import torchrun

from geofed.codec import ErrorFeedback, decoder_for, make_codec


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One launch of 2 ranks: the push for three codecs, the downlink, and a sharded checkpoint."""
    tmp = tmp_path_factory.mktemp("shards2")
    proc = torchrun(worker.__file__, "push", str(tmp / "out.pt"), str(tmp / "ckpt"), cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return torch.load(tmp / "out.pt", weights_only=True), tmp / "ckpt"


def one_rank_reference(got: dict, name: str, block: int, ranges: list) -> tuple[bytes, bytes, np.ndarray]:
    """The one-rank encoding of the test's own δ with the residual the ranks started from."""
    delta = (got["local"] - got["base"]).numpy()
    ef = ErrorFeedback(delta.size)
    ef.residual[:] = np.concatenate([np.linspace(-1e-3, 1e-3, b - a, dtype=np.float32) for a, b in ranges])
    header, frames = ef.encode(make_codec(name, "huffman", block), delta, frame_elems=worker.FRAME)
    return header, b"".join(frames), ef.staged


def decoded(header: bytes, frames: bytes, numel: int) -> np.ndarray:
    dec = decoder_for(header, max_numel=numel)
    out = np.full(numel, np.nan, np.float32)
    for offset, values in dec.feed(frames):
        out[offset : offset + values.size] = values
    dec.finish()
    return out


@pytest.mark.parametrize("key", ["int8/0", "int8/4096", "fp32/0"])
def test_slice_wise_push_is_the_one_rank_stream(two_ranks, key):
    got, _ = two_ranks
    run = got["codecs"][key]
    name, block = key.split("/")
    # The flat split is uneven (37 and 36 frames of 16384; rows of 2001 and 97 split unevenly by FSDP).
    assert [b - a for a, b in run["ranges"]] == [37 * worker.FRAME, got["numel"] - 37 * worker.FRAME]

    header, frames, staged = one_rank_reference(got, name, int(block), run["ranges"])

    # The PS's decoder gets byte for byte the one-rank stream, and the ranks' residuals are its residual.
    assert run["header"] == header and run["frames"] == frames
    ps_view = decoded(run["header"], run["frames"], got["numel"])
    np.testing.assert_array_equal(ps_view, decoded(header, frames, got["numel"]))
    np.testing.assert_array_equal(run["residual"].numpy(), staged)
    corrected = (got["local"] - got["base"]).numpy() + np.concatenate(
        [np.linspace(-1e-3, 1e-3, b - a, dtype=np.float32) for a, b in run["ranges"]])
    if name == "fp32":
        np.testing.assert_array_equal(ps_view, corrected)  # lossless: the test's δ + residual, exactly
    # What the PS got plus what the ranks kept is δ + residual (error feedback loses nothing).
    np.testing.assert_allclose(ps_view + run["residual"].numpy(), corrected, atol=1e-6)


def test_leader_never_holds_a_full_size_buffer_on_the_slice_wise_path(two_ranks):
    got, _ = two_ranks
    numel = got["numel"]
    for key, run in got["codecs"].items():
        # Torch tensors and live numpy arrays on rank 0 while it encodes and relays: at most its slice.
        assert run["largest"] <= 37 * worker.FRAME < numel, key
        assert run["largest_numpy"] <= 37 * worker.FRAME, key
    assert got["load_largest"] <= 37 * worker.FRAME
    # The same instruments see today's gather path hold the whole vector, so they can fail.
    assert got["gather_path_largest"] >= numel and got["gather_path_numpy"] >= numel


def test_each_rank_applies_its_slice_of_the_global_model(two_ranks):
    got, _ = two_ranks
    assert got["kept_ok"]  # rank 0 kept exactly its range of the global vector as its next delta base
    assert torch.equal(got["after_load"], got["base"])  # gathered back by the old path: every shard written


def test_a_model_built_on_the_meta_device_holds_only_its_shards_and_takes_the_global_model(two_ranks):
    got, _ = two_ranks
    assert got["meta_layout"]  # the manifest of the same config built the ordinary way
    assert torch.equal(got["meta_back"], got["meta_flat"])
    assert got["meta_held"] < 0.6 * got["meta_numel"]  # rank 0 allocated about half the model, not all of it


def check_restored(saved: dict, restored: dict) -> None:
    assert restored["meta"] == {"step": 2, "base_version": 9}
    assert torch.equal(restored["model"], saved["model"])
    assert torch.equal(restored["residual"], saved["residual"])
    assert torch.equal(restored["staged"], saved["staged"])
    assert sorted(restored["optimizer"]) == sorted(saved["optimizer"]) == ["cube", "emb", "gate.bias",
                                                                           "gate.weight", "proj.bias",
                                                                           "proj.weight"]
    for name, state in saved["optimizer"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(restored["optimizer"][name][key]), torch.as_tensor(value)), (name, key)
    assert saved["optimizer"]["emb"]["exp_avg"].abs().max() > 0  # AdamW really has state to lose


def test_a_meta_built_model_on_one_rank_keeps_its_tied_embeddings(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    got = worker.meta_build(0, 1)
    assert got["meta_layout"] and torch.equal(got["meta_back"], got["meta_flat"])


def test_checkpoint_of_two_ranks_restores_on_one(two_ranks, tmp_path, monkeypatch):
    got, ckpt = two_ranks
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    worker.restore(ckpt, tmp_path / "one.pt")
    check_restored(got["saved"], torch.load(tmp_path / "one.pt", weights_only=True))


@pytest.mark.slow
def test_checkpoint_of_two_ranks_restores_on_three(two_ranks, tmp_path):
    got, ckpt = two_ranks
    proc = torchrun(worker.__file__, "restore", str(ckpt), str(tmp_path / "three.pt"), cwd=tmp_path, nproc=3)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    restored = torch.load(tmp_path / "three.pt", weights_only=True)
    assert restored["world"] == 3
    check_restored(got["saved"], restored)
