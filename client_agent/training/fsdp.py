"""Several GPUs of one site as one client: `torchrun` + FSDP2 (paper §III, "Client: an FSDP worker").

Only rank 0 talks to the PS. It gathers the full model as the flat fp32 vector of `client_agent.training.flat`
to compute the delta, and broadcasts each new global model to every rank's shards. Collectives are
issued parameter by parameter, so no rank ever holds more than one full parameter beyond its shards.
Optimizer state is saved in the FQN-keyed full form of `torch.distributed.checkpoint.state_dict`, so
a checkpoint taken on N GPUs restores on M.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from client_agent.training.flat import Select, flat_numel, selected
from client_agent.training.model import gpt2_config, hf_config, is_native
from client_agent.training.precision import Precision
from geofed.config import ModelConfig


def is_distributed() -> bool:
    """True inside an initialised process group of more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def local_device() -> torch.device:
    """This rank's device: `cuda:<LOCAL_RANK>` when GPUs are present, else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def comm_device() -> torch.device:
    """Where tensors must be for the process group's collectives: the GPU under NCCL, else the CPU."""
    return local_device() if dist.get_backend() == "nccl" else torch.device("cpu")


def init_distributed(backend: str | None = None, timeout_s: float | None = None) -> tuple[int, int]:
    """(rank, world) from torchrun's environment; (0, 1) without initialising anything when run alone.

    `timeout_s` bounds every collective (torch's default: 10 min for NCCL, 30 for gloo). Waits for the
    PS are not collectives: the other ranks spend them in `leader_wait`, which never reaches this limit.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    if not dist.is_initialized():
        device = local_device()
        if device.type == "cuda":
            torch.cuda.set_device(device)
        timeout = timedelta(seconds=timeout_s) if timeout_s else None
        dist.init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"), timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks to shard one by one: the classes the model marks `_no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names and m is not model]


def shard_model(model: nn.Module, precision: Precision | None = None) -> nn.Module:
    """`fully_shard` each transformer block, then the root; bf16/fp16 compute with fp32 gradient reduction.

    `model` may live on the CPU (random init, a pretrained load, or the uninitialised shell of
    `build_model_shell`). Note: it is sharded on the meta device and only this rank's shards are then
    allocated on the local device (torchtitan's meta-device init), so no GPU ever holds the whole model;
    each shard is cut from the rank's own CPU copy, one parameter at a time, without communication.
    Buffers (e.g. rotary frequencies) are small and are copied whole.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import distribute_tensor

    device = local_device()
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    if precision is None or precision.name == "fp32":
        policy = MixedPrecisionPolicy()
    else:
        policy = MixedPrecisionPolicy(param_dtype=precision.dtype, reduce_dtype=torch.float32)
    values = {name: p.detach() for name, p in model.named_parameters()}
    buffers = {name: b.detach() for name, b in model.named_buffers()}
    model.to("meta")
    if hasattr(model, "tie_weights"):
        model.tie_weights()  # moving to meta makes new parameter objects: tie the embeddings again
    for block in _blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device=device)  # allocates the shards only
    with torch.no_grad():
        for name, param in model.named_parameters():
            full = values.pop(name)
            if full.is_meta:
                continue  # built on the meta device (`build_on_meta`): the global model fills the shards
            shard = distribute_tensor(full.to(device), param.device_mesh, param.placements, src_data_rank=None)
            param.to_local().copy_(shard.to_local())
        for name, buf in model.named_buffers():
            buf.copy_(buffers[name])
    return model


def build_on_meta(cfg: ModelConfig, *, transformers_model: bool = False) -> nn.Module:
    """The model's structure on the meta device: parameters without storage, buffers built for
    real (the PS does not send them). `shard_model` then allocates only this rank's shards, so no rank
    ever holds the whole model; they are filled from the global model (`slices.partition.load_global_slices`).
    `transformers_model` as for `client_agent.training.model.build_model`."""
    if is_native(cfg, transformers_model):
        from client_agent.training.gpt2 import GPT2LMHeadModel

        with torch.device("meta"):
            return GPT2LMHeadModel(gpt2_config(cfg))  # it has no buffers
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(hf_config(cfg))
    model.tie_weights()
    return model


def materialise(model: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """Allocate a `build_on_meta` model whole on `device` (a single rank owns everything), uninitialised.

    `to_empty` gives tied parameters (GPT-2's embedding and head) separate new objects: tie them again,
    or the model would grow a second vocabulary-sized matrix and no longer match the manifest."""
    model.to_empty(device=device)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model


def reshard(model: nn.Module) -> None:
    """Return every FSDP unit to its sharded parameters.

    FSDP2 keeps the root unit unsharded after a forward that has no backward (evaluation), and then
    `named_parameters()` yields plain tensors, not the DTensors the optimizer holds.
    """
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _full(param: torch.Tensor) -> torch.Tensor:
    """The whole parameter (an all-gather for a sharded DTensor; every rank must call it)."""
    return param.full_tensor() if hasattr(param, "full_tensor") else param


@torch.no_grad()
def full_flat_on_rank0(model: nn.Module, select: Select | None = None) -> torch.Tensor | None:
    """Gather the exchanged parameters into one flat fp32 CPU vector on rank 0 (None elsewhere)."""
    rank = dist.get_rank() if is_distributed() else 0
    if is_distributed():
        reshard(model)
    flat = torch.empty(flat_numel(model, select), dtype=torch.float32) if rank == 0 else None
    offset = 0
    for _, param in selected(model, select):
        full = _full(param.detach())
        n = full.numel()
        if flat is not None:
            flat[offset : offset + n].copy_(full.reshape(-1))
        offset += n
    return flat


@torch.no_grad()
def broadcast_flat_from_rank0(model: nn.Module, flat: torch.Tensor | None, select: Select | None = None) -> None:
    """Load rank 0's flat vector (e.g. a new global model) into every rank's shards; collective."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    rank = dist.get_rank()
    reshard(model)
    numel = flat_numel(model, select)
    if rank == 0 and (flat is None or flat.dim() != 1 or flat.numel() != numel):
        shape = None if flat is None else tuple(flat.shape)
        raise ValueError(f"rank 0 needs a 1-D flat vector of {numel} elements, got {shape}")
    on_gpu = dist.get_backend() == "nccl"
    offset = 0
    for _, param in selected(model, select):
        local = param.to_local() if isinstance(param, DTensor) else param
        device = local.device if on_gpu else torch.device("cpu")
        n = param.numel()
        if rank == 0:
            buf = flat[offset : offset + n].to(device=device, dtype=torch.float32)
        else:
            buf = torch.empty(n, dtype=torch.float32, device=device)
        dist.broadcast(buf, src=0)
        full = buf.view(param.shape).to(local.dtype)
        if isinstance(param, DTensor):
            # Every rank now holds the full tensor, so cut the local shard without communication.
            local.copy_(distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local())
        else:
            local.copy_(full)
        offset += n


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state keyed by parameter name with full tensors (on rank 0; empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    if is_distributed():
        reshard(model)
    options = StateDictOptions(full_state_dict=True, cpu_offload=is_distributed())
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Restore `full_optimizer_state` output; under FSDP rank 0's copy is broadcast and sharded."""
    if not is_distributed():  # plain tensors: no warm-up step, no copy (optimizer_state.py, rejoin time)
        from .optimizer_state import load_named_optimizer_state

        load_named_optimizer_state(model, optimizer, state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    reshard(model)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_optimizer_state_dict(model, optimizer, state, options=options)
