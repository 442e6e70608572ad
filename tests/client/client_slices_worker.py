"""One rank of a slice-wise push, run by `test_client_slices.py` under torchrun (1-4 gloo ranks).

Every rank builds the same small model with awkward shapes (rows that do not divide by the rank count,
a 2-row bias over 3 ranks), moves it to θ_local = θ_base + seeded noise, shards it with FSDP2, and then
pushes its own slice of δ = θ_local − θ_base through error feedback and the codec. Rank 0 spools every
rank's frames as the push would and, outside the instrumented part, decodes them with the PS's decoder.
The test compares that with its own reference. Rank 0 writes what it saw to `<out>`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from client_agent.training.fsdp import full_flat_on_rank0, full_optimizer_state, init_distributed, shard_model
from client_agent.training.slices.checkpoint import load_sharded, save_sharded
from client_agent.training.slices.partition import FlatPartition, gather_slice, load_global_slices
from client_agent.training.slices.push import encode_slice, frames_to_leader
from geofed.codec import ErrorFeedback, decoder_for, make_codec

FRAME = 16384


class Tiny(nn.Module):
    """Odd shapes on purpose (1001 and 97 rows, a 2-element bias: fewer rows than 3 ranks, a 3-D tensor);
    ~1.2M elements, so a full-size buffer stands out from the codec's fixed tables (2^16 counts at most)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Parameter(torch.randn(2001, 301))
        self.proj = nn.Linear(301, 1500)
        self.cube = nn.Parameter(torch.randn(97, 31, 43))
        self.gate = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A loss touching every parameter (so AdamW has state for each)."""
        h = self.proj(x)
        return (self.gate(h[:, :5]).pow(2).mean() + 0.1 * self.emb.pow(2).mean() + 0.1 * self.cube.pow(2).mean())


def model_and_reference(seed: int) -> tuple[Tiny, torch.Tensor, torch.Tensor]:
    """The model at θ_local, and θ_base and θ_local flattened here (the test's own flattening)."""
    torch.manual_seed(seed)
    model = Tiny()
    base = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(torch.randn(p.shape, generator=gen) * (0.01 * (i + 1)))
    local = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    return model, base, local


class LargestTensor(TorchDispatchMode):
    """Records the most elements any tensor produced by a torch op had (allocations and views alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                local = getattr(t, "_local_tensor", t)  # a DTensor's own storage is its local shard
                self.most = max(self.most, local.numel())
        return out


def largest_numpy_block() -> int:
    """Elements (float32-sized) of the largest numpy allocation alive now (numpy reports to tracemalloc)."""
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return max((t.size for t in snap.traces), default=0) // 4


def push(codec_name: str, block: int, model: nn.Module, base_slice: torch.Tensor, part: FlatPartition, rank: int,
         spool) -> tuple[ErrorFeedback, int]:
    """This rank's part of a push; rank 0 writes every rank's frames to `spool` (as `PSClient.prepare` does)."""
    a, b = part.range(rank)
    delta = gather_slice(model, part).sub_(base_slice)
    ef = ErrorFeedback(b - a)
    ef.residual[:] = np.linspace(-1e-3, 1e-3, b - a, dtype=np.float32)  # a residual from an earlier round
    header, frames = encode_slice(make_codec(codec_name, "huffman", block), delta, part, rank, ef, FRAME)
    relayed = frames_to_leader(frames, rank, part.world)
    most_numpy = largest_numpy_block()  # the residual, its staged successor and δ + residual are alive now
    if relayed is not None:
        spool.write(len(header).to_bytes(4, "little") + header)
        own = -(-(b - a) // FRAME)
        for i, frame in enumerate(relayed):
            spool.write(frame)
            if i in (0, own):  # while encoding its own frames, and once relaying another rank's
                most_numpy = max(most_numpy, largest_numpy_block())
    return ef, most_numpy


def main(out: Path, ckpt: Path) -> None:
    rank, world = init_distributed()
    model, base, local = model_and_reference(seed=5)
    numel = base.numel()
    if world > 1:
        shard_model(model)
    results: dict = {"world": world, "numel": numel, "base": base, "local": local, "codecs": {}}
    for codec_name, block in (("int8", 0), ("int8", 4096), ("fp32", 0)):
        part = FlatPartition.for_codec(numel, world, FRAME, block)
        with tempfile.TemporaryFile() as spool:
            a, b = part.range(rank)
            base_slice = base[a:b].clone()  # what this rank kept from the last downlink
            watch = LargestTensor()
            tracemalloc.start()  # only around the push: a snapshot costs time per traced allocation
            with watch:
                ef, most_numpy = push(codec_name, block, model, base_slice, part, rank, spool)
            tracemalloc.stop()
            # The residual slices, gathered here for the test only (the push never gathers them).
            full_residual = gather_residual(ef, part, "staged")
            if rank == 0:
                spool.seek(0)
                data = spool.read()
                header_len = 4 + int.from_bytes(data[:4], "little")
                dec = decoder_for(data[4:header_len], max_numel=numel)
                decoded = np.empty(numel, np.float32)
                for offset, values in dec.feed(data[header_len:]):
                    decoded[offset : offset + values.size] = values
                dec.finish()
                results["codecs"][f"{codec_name}/{block}"] = {
                    "header": data[4:header_len], "frames": data[header_len:], "decoded": torch.from_numpy(decoded),
                    "residual": full_residual,
                    "largest": watch.most, "largest_numpy": most_numpy, "ranges": part.ranges(),
                }
    # Downlink: the base model goes back into the shards from rank 0's vector, slice by slice.
    part = FlatPartition.for_codec(numel, world, FRAME)
    watch = LargestTensor()
    with watch:
        kept = load_global_slices(model, part, base if rank == 0 else None)
    a, b = part.range(rank)
    results["kept_ok"] = bool(torch.equal(kept, base[a:b]))
    results["load_largest"] = watch.most
    gather_watch = LargestTensor()
    with gather_watch:
        after = full_flat_on_rank0(model) if world > 1 else torch.cat([p.detach().reshape(-1) for p in
                                                                       model.parameters()])
    results["gather_path_largest"] = gather_watch.most
    if rank == 0:  # today's leader: error feedback and encoding over the whole gathered delta
        tracemalloc.start()
        ef_full = ErrorFeedback(numel)
        _, frames = ef_full.encode(make_codec("int8"), (after - base).numpy(), frame_elems=FRAME)
        most = largest_numpy_block()
        next(frames)
        most = max(most, largest_numpy_block())
        tracemalloc.stop()
        results["gather_path_numpy"] = most
    if rank == 0:
        results["after_load"] = after
    results["saved"] = save_checkpoint(ckpt, model, part, rank, world)
    results.update(meta_build(rank, world))
    if rank == 0:
        torch.save(results, out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def meta_build(rank: int, world: int) -> dict:
    """A GPT-2 built on the meta device, sharded, and filled from rank 0's vector slice by slice."""
    from client_agent.training.flat import flat_numel, manifest
    from client_agent.training.fsdp import build_on_meta, materialise
    from client_agent.training.model import build_model
    from geofed.config import ModelConfig

    cfg = ModelConfig(family="gpt2", n_layer=2, n_head=2, n_embd=32, block_size=16)
    model = build_on_meta(cfg)
    if world > 1:
        shard_model(model)
    else:
        materialise(model)
    same_layout = manifest(model) == manifest(build_model(cfg))  # tied embeddings stay tied
    numel = flat_numel(model)
    flat = torch.randn(numel, generator=torch.Generator().manual_seed(11))
    held = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    load_global_slices(model, FlatPartition.for_codec(numel, world, 4096), flat if rank == 0 else None)
    back = full_flat_on_rank0(model) if world > 1 else torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {"meta_flat": flat, "meta_back": back, "meta_held": held, "meta_numel": numel, "meta_layout": same_layout}


def gather_residual(ef: ErrorFeedback, part: FlatPartition, what: str) -> torch.Tensor:
    """The full residual on every rank, for the test's comparison only."""
    sizes = [b - a for a, b in part.ranges()]
    mine = torch.zeros(max(sizes), dtype=torch.float32)
    value = getattr(ef, what)
    mine[: value.size] = torch.from_numpy(value)
    parts = [torch.empty_like(mine) for _ in sizes]
    if part.world > 1:
        dist.all_gather(parts, mine)
    else:
        parts = [mine]
    return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)])


def snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, ef: ErrorFeedback, part: FlatPartition) -> dict:
    """Full model, full optimizer state and full residuals (rank 0's copy is the one that matters)."""
    flat = full_flat_on_rank0(model) if part.world > 1 else torch.cat([p.detach().reshape(-1) for p in
                                                                      model.parameters()])
    optim = full_optimizer_state(model, optimizer)
    return {"model": flat, "optimizer": optim["state"] if optim else {},
            "residual": gather_residual(ef, part, "residual"), "staged": gather_residual(ef, part, "staged")}


def save_checkpoint(ckpt: Path, model: nn.Module, part: FlatPartition, rank: int, world: int) -> dict:
    """Two AdamW steps and a residual with a staged successor, saved sharded; what was saved, in full."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(4, 301, generator=torch.Generator().manual_seed(7))
    for _ in range(2):
        model(x).backward()
        optimizer.step()
        optimizer.zero_grad()
    a, b = part.range(rank)
    ef = ErrorFeedback(b - a)
    ef.residual[:] = np.linspace(-1e-3, 2e-3, b - a, dtype=np.float32) + rank
    delta = gather_slice(model, part)
    _, frames = encode_slice(make_codec("int8"), delta, part, rank, ef, FRAME)  # stages a new residual
    for _ in frames:
        pass
    save_sharded(ckpt, 2, model, optimizer, part, ef, {"step": 2, "base_version": 9})
    return snapshot(model, optimizer, ef, part)


def restore(ckpt: Path, out: Path) -> None:
    """A fresh model (another seed), optimizer and residual on this many ranks, loaded from `ckpt`."""
    rank, world = init_distributed()
    torch.manual_seed(99)
    model = Tiny()
    if world > 1:
        shard_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    numel = sum(p.numel() for p in model.parameters())
    part = FlatPartition.for_codec(numel, world, FRAME)
    a, b = part.range(rank)
    ef = ErrorFeedback(b - a)
    meta = load_sharded(ckpt, model, optimizer, part, ef)
    got = snapshot(model, optimizer, ef, part)
    if rank == 0:
        torch.save({"world": world, "meta": meta, **got}, out)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "restore":
        restore(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(Path(sys.argv[2]), Path(sys.argv[3]))
    # gloo's C++ threads can abort in static destructors at interpreter exit, after all work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
