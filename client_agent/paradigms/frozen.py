"""The digest of what a client builds itself and never trains nor exchanges: the frozen base, fixed projections.

Every client of a paradigm that keeps a frozen part must build the same one (from `model.path` or the
seeded init, and the paradigm's seeded buffers); the PS compares the clients' digests at Join.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def tensors_digest(tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 hex over each tensor's name, dtype, shape and bytes, in the order given."""
    h = hashlib.sha256()
    for name, tensor in tensors:
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
