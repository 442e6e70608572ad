"""Zeroth-order on LoRA adapters (MeZO on LoRA): the federated update against a plain-torch reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from client_agent.data.streams import TokenStream
from client_agent.paradigms import client_paradigm
from client_agent.training.flat import flatten
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig
from geofed_testing.payloads import FakePayload
from ps_server.aggregation.rounds import Admission
from ps_server.aggregation.strategies import build_strategy
from ps_server.global_model import Snapshot, sha256_of

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}
SEEDS, EPS, LR, FED_SEED, VERSION = 4, 1e-3, 0.5, 3, 6


def _fed(**paradigm) -> FederationConfig:
    return FederationConfig.model_validate({
        "model": TINY, "aggregation": {"norm_bound_multiple": 0.0},
        "paradigm": {"name": "zo", "seeds": SEEDS, "eps": EPS, "lr": LR, "seed": FED_SEED, "params": "lora",
                     "rank": 2, "alpha": 4.0, **paradigm},
    })


def _stream(seed: int) -> TokenStream:
    tokens = np.random.default_rng(seed).integers(0, 256, 8192).astype(np.uint16)
    return TokenStream(tokens, 16, seed=seed)


def _reference_direction(k: int, numel: int) -> np.ndarray:
    key = np.array([FED_SEED, (VERSION << 24) | k], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=key)).standard_normal(numel, dtype=np.float32)


def test_zo_lora_perturbs_and_exchanges_only_the_adapters_on_a_frozen_base():
    fed = _fed()
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    names = [n for n, p in model.named_parameters() if paradigm.exchanged(n, p)]

    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert fed.paradigm.transformers_model and not _fed(params="bias").paradigm.transformers_model
    assert not any(p.requires_grad for p in model.parameters())  # two forwards, no backward


def test_the_federated_zo_lora_update_equals_a_plain_torch_reference():
    fed = _fed()
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    theta = flatten(model, paradigm.exchanged)
    adapters = [p for n, p in model.named_parameters() if ".lora_A." in n or ".lora_B." in n]
    with torch.no_grad():  # B starts at zero: move it so that A's directions count too
        for p in adapters:
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    theta = flatten(model, paradigm.exchanged)

    scalars = []
    for client in (1, 2):  # two clients, one model each at the same global version, different data
        trainer = LocalTrainer(model, fed.training, _stream(client), "cpu", micro_batch_size=8)
        paradigm.local_update(trainer, 0, None, VERSION)
        out = torch.empty(SEEDS)
        paradigm.delta(None, out, model, None)
        scalars.append(out.numpy().copy())
    strategy = build_strategy(fed)
    strategy.install(theta.numel(), ())
    flat0 = theta.numpy()
    acc = strategy.open_round(Snapshot(VERSION, flat0, sha256_of(flat0), ()))
    for client, g in zip(("a", "b"), scalars, strict=True):
        strategy.fold(acc, FakePayload(client, g), Admission(0, 1.0), num_tokens=100, local_steps=SEEDS)
    published = strategy.apply(Snapshot(VERSION, flat0, sha256_of(flat0), ()), strategy.close(acc))

    # Reference: plain torch, the same batches, every client's two-point estimates averaged, one SGD step.
    def loss_at(vector: torch.Tensor, batch: torch.Tensor) -> float:
        torch.nn.utils.vector_to_parameters(vector, adapters)
        logits = model(input_ids=batch[:, :-1]).logits
        return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)))

    g_ref = np.zeros(SEEDS)
    with torch.no_grad():
        for client in (1, 2):
            stream = _stream(client)
            for k in range(SEEDS):
                z = torch.from_numpy(_reference_direction(k, theta.numel()))
                batch = stream.next_batch(fed.training.batch_size)
                g_ref[k] += (loss_at(theta + EPS * z, batch) - loss_at(theta - EPS * z, batch)) / (2 * EPS) / 2
        torch.nn.utils.vector_to_parameters(theta, adapters)
    expected = flat0 - LR / SEEDS * sum(g_ref[k] * _reference_direction(k, theta.numel()) for k in range(SEEDS))

    assert np.abs(g_ref).max() > 1e-3  # the estimates are not all zero: the step is a real one
    np.testing.assert_allclose(np.mean(scalars, axis=0), g_ref, rtol=2e-2, atol=2e-3)
    np.testing.assert_allclose(published - flat0, expected - flat0, rtol=2e-2, atol=1e-5)
    assert torch.equal(flatten(model, paradigm.exchanged), theta)  # clients never move θ on their own


def test_zo_lora_refuses_an_adapter_layer_the_model_does_not_have():
    with pytest.raises(ValueError, match="q_proj is not a layer of a gpt2 model"):
        _fed(target_modules=["q_proj"])
