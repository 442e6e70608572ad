"""Real honest clients for the robustness benches: the federation's model and AdamW, each client on its own
module split of the Python standard library, every model starting from the same initialisation."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_agent.data.corpus import stdlib_split  # noqa: E402
from client_agent.data.files import load_tokens  # noqa: E402
from client_agent.data.streams import TokenStream
from client_agent.data.tokenizer import load_tokenizer  # noqa: E402
from client_agent.training.model import build_model  # noqa: E402
from client_agent.training.trainer import LocalTrainer  # noqa: E402
from geofed.config import FederationConfig  # noqa: E402


def honest_trainers(fed: FederationConfig, clients: int, seed: int = 0) -> list[LocalTrainer]:
    """One CPU `LocalTrainer` per client (data split and order seeded by `seed`), all from one Θ0."""
    tok = load_tokenizer(None)
    split = stdlib_split(clients, seed=seed)
    streams = [
        TokenStream(load_tokens(list(files), tok)[0], fed.model.block_size, seed=seed * 10 + i)
        for i, files in enumerate(split.clients)
    ]
    torch.manual_seed(fed.model.seed)
    models = [build_model(fed.model) for _ in streams]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    t = fed.training
    return [LocalTrainer(m, t, s, "cpu", micro_batch_size=t.batch_size) for m, s in zip(models, streams, strict=True)]
