"""LoRA, Hybrid LoRA and RAVAN, both halves without a socket: what is trained, exchanged, kept, refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from client_agent.data.streams import TokenStream
from client_agent.paradigms import ParadigmError, client_paradigm
from client_agent.training.trainer import LocalTrainer
from geofed.config import FederationConfig
from geofed.manifest import TensorEntry
from geofed.paradigms.lora import LoRASettings
from geofed_testing.payloads import FakePayload
from ps_server.aggregation.rounds import Admission
from ps_server.aggregation.strategies import build_strategy
from ps_server.global_model import Snapshot

TINY = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}
ADAPTER = {"rank": 4, "alpha": 8.0, "target_modules": ["c_attn", "c_fc"]}


def _fed(name: str, agg: dict | None = None, **paradigm) -> FederationConfig:
    return FederationConfig.model_validate({"model": TINY, "aggregation": agg or {},
                                            "paradigm": {"name": name, **ADAPTER, **paradigm}})


def _built(fed: FederationConfig):
    paradigm = client_paradigm(fed.paradigm)
    return paradigm, paradigm.prepare(paradigm.build(fed, initialise=True))


def _logits(model, seed=0):
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model(input_ids=ids).logits


def _randomise(model, match: str) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if match in name:
                p.normal_(0, 0.5)


# ---- LoRA ---------------------------------------------------------------------------------------------


def test_lora_trains_and_exchanges_exactly_the_adapters_and_starts_as_the_base():
    fed = _fed("lora")
    paradigm, model = _built(fed)
    base = client_paradigm(FederationConfig.model_validate({"model": TINY}).paradigm)
    base_model = base.prepare(base.build(fed, initialise=True))

    names = [t.name for t in paradigm.manifest(model)]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert len(names) == 2 * 2  # A and B of c_attn and c_fc in one block
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(names)
    assert torch.allclose(_logits(model), _logits(base_model))  # B = 0: the identity
    assert paradigm.private_state(model) == {}


def test_lora_merged_export_computes_what_the_adapted_model_computes():
    paradigm, model = _built(_fed("lora"))
    _randomise(model, "lora_")
    adapted = _logits(model)

    merged = paradigm.export(model)

    assert not any("lora" in n for n, _ in merged.named_parameters())
    assert torch.allclose(_logits(merged), adapted, atol=1e-5)


@pytest.mark.parametrize(("settings", "message"), [
    ({"target_modules": ["q_proj"]}, "paradigm.target_modules: q_proj"),
    ({"rank": 64}, "paradigm.rank 64"),
])
def test_lora_settings_that_cannot_fit_the_model_are_refused_at_validation_naming_the_setting(settings, message):
    with pytest.raises(ValidationError, match=message):
        _fed("lora", **settings)


@pytest.mark.parametrize(("settings", "message"), [
    ({"target_modules": ["nope"]}, "paradigm.target_modules: nope names no linear layer"),
    ({"rank": 33}, "paradigm.rank 33 is larger than layer .*c_attn's smaller dimension 32"),
])
def test_lora_on_a_model_whose_layers_do_not_fit_is_refused_by_the_client_before_training(settings, message):
    # A base from model.path is only checked on the client, against its real layers.
    fed = FederationConfig.model_validate({"model": TINY})
    paradigm = client_paradigm(LoRASettings(**{**ADAPTER, **settings}))

    with pytest.raises(ParadigmError, match=message):
        paradigm.prepare(paradigm.build(fed, initialise=True))


def _pair_manifest(r: int, n_in: int, n_out: int) -> tuple[TensorEntry, ...]:
    return (TensorEntry("l.lora_A.default.weight", (r, n_in), "float32"),
            TensorEntry("l.lora_B.default.weight", (n_out, r), "float32"))


def _round(strategy, manifest, base: np.ndarray, clients: list[np.ndarray]) -> np.ndarray:
    strategy.install(base.size, manifest)
    snap = Snapshot(1, base, b"", manifest)
    acc = strategy.open_round(snap)
    for i, flat in enumerate(clients):
        strategy.fold(acc, FakePayload(f"c{i}", flat - base), Admission(0, 1.0), num_tokens=100, local_steps=1)
    return strategy.apply(snap, strategy.close(acc))


def _product(flat: np.ndarray, r: int, n_in: int, n_out: int) -> np.ndarray:
    a = flat[: r * n_in].reshape(r, n_in).astype(np.float64)
    b = flat[r * n_in :].reshape(n_out, r).astype(np.float64)
    return b @ a


def test_product_aggregation_is_exact_where_separate_averaging_is_not_and_never_further_off():
    r, n_in, n_out = 2, 6, 5
    manifest = _pair_manifest(r, n_in, n_out)
    rng = np.random.default_rng(0)
    base = np.concatenate([rng.normal(size=r * n_in), np.zeros(n_out * r)]).astype(np.float32)
    agg = {"global_lr": 1.0, "outer_optimizer": "fedavg", "weighting": "uniform", "norm_bound_multiple": 0.0}

    def rank_one_client() -> np.ndarray:  # a rank-1 product each: their mean has rank 2 = r, so rank r is exact
        a = np.zeros((r, n_in))
        a[0] = rng.normal(size=n_in)
        b = np.zeros((n_out, r))
        b[:, 0] = rng.normal(size=n_out)
        return np.concatenate([a.ravel(), b.ravel()]).astype(np.float32)

    for clients, exact in (([rank_one_client(), rank_one_client()], True),
                           ([rng.normal(size=base.size).astype(np.float32) for _ in range(3)], False)):
        mean_product = np.mean([_product(c, r, n_in, n_out) for c in clients], axis=0)
        separate = _round(build_strategy(_fed("lora", agg, rank=r)), manifest, base, clients)
        product = _round(build_strategy(_fed("lora", agg, rank=r, aggregation="product")), manifest, base, clients)
        err_separate = np.linalg.norm(_product(separate, r, n_in, n_out) - mean_product)
        err_product = np.linalg.norm(_product(product, r, n_in, n_out) - mean_product)

        assert err_product <= err_separate + 1e-6
        if exact:
            assert err_product < 1e-4 * np.linalg.norm(mean_product) < err_separate


def test_the_lora_strategy_refuses_a_layout_that_is_not_adapters():
    strategy = build_strategy(_fed("lora"))
    with pytest.raises(ValueError, match="adapters only, but the manifest holds transformer.wte.weight"):
        strategy.check_manifest((TensorEntry("transformer.wte.weight", (257, 32), "float32"),))


# ---- Hybrid LoRA ------------------------------------------------------------------------------------------


def test_hybrid_lora_exchanges_the_base_and_keeps_the_adapters_private_across_a_checkpoint():
    paradigm, model = _built(_fed("hybrid-lora"))
    adapters = {n for n, _ in model.named_parameters() if "lora_" in n}

    assert {t.name for t in paradigm.manifest(model)} == {n for n, _ in model.named_parameters()} - adapters
    _randomise(model, "lora_")
    saved = paradigm.private_state(model)
    assert set(saved) == adapters

    _, fresh = _built(_fed("hybrid-lora"))
    paradigm.load_private_state(fresh, saved)
    assert all(torch.equal(dict(fresh.named_parameters())[n], saved[n]) for n in adapters)
    with pytest.raises(ParadigmError, match="checkpoint lacks the private parameter"):
        paradigm.load_private_state(fresh, {})


@pytest.mark.parametrize(("lora_steps", "base_steps", "moved"), [(2, 0, "adapters"), (0, 2, "base")])
def test_hybrid_lora_rounds_train_the_adapters_then_the_base_and_nothing_else(lora_steps, base_steps, moved):
    fed = _fed("hybrid-lora", lora_steps=lora_steps, base_steps=max(1, base_steps))
    paradigm, model = _built(fed)
    _randomise(model, "lora_B")  # B = 0 would give A no gradient
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stream = TokenStream(np.random.default_rng(0).integers(0, 256, 4096).astype(np.uint16), 32, seed=0)
    trainer = LocalTrainer(model, fed.training, stream, "cpu", micro_batch_size=4)

    stats = paradigm.local_update(trainer, lora_steps + base_steps, None, 1)

    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    adapters = {n for n in before if "lora_" in n}
    assert stats.steps == lora_steps + base_steps
    assert changed and (changed <= adapters if moved == "adapters" else not changed & adapters)
    assert all(p.requires_grad for p in model.parameters())  # both phases trainable again afterwards


def test_the_hybrid_strategy_refuses_a_layout_that_would_carry_adapters():
    strategy = build_strategy(_fed("hybrid-lora"))
    with pytest.raises(ValueError, match="keeps adapters private"):
        strategy.check_manifest((TensorEntry("h.c_attn.lora_A.default.weight", (4, 32), "float32"),))


# ---- RAVAN ----------------------------------------------------------------------------------------------


def test_ravan_exchanges_only_the_heads_and_every_client_draws_the_same_frozen_projections():
    fed = _fed("ravan", heads=3)
    paradigm, model = _built(fed)
    _, other = _built(fed)
    _, reseeded = _built(_fed("ravan", heads=3, seed=1))

    assert [(t.name.rsplit(".", 2)[-2], t.shape) for t in paradigm.manifest(model)] == [
        ("c_attn", (3, 4, 4)), ("c_fc", (3, 4, 4))]
    heads = {t.name for t in paradigm.manifest(model)}
    assert {n for n, p in model.named_parameters() if p.requires_grad} == heads | {
        n.replace("ravan_H", "ravan_s") for n in heads}  # each head's scaling trains, never travels
    buffers, others, reseeds = (dict(m.named_buffers()) for m in (model, other, reseeded))
    projections = [n for n in buffers if "ravan_A" in n or "ravan_B" in n]
    assert projections and all(torch.equal(buffers[n], others[n]) for n in projections)
    assert not any(torch.equal(buffers[n], reseeds[n]) for n in projections)


def test_averaging_ravan_heads_averages_the_layer_updates_and_export_merges_them():
    paradigm, model = _built(_fed("ravan"))
    layer = model.transformer.h[0].attn.c_attn
    h1, h2 = torch.randn_like(layer.ravan_H), torch.randn_like(layer.ravan_H)
    updates = []
    for h in (h1, h2, (h1 + h2) / 2):
        with torch.no_grad():
            layer.ravan_H.copy_(h)
        updates.append(layer.update())
    assert torch.allclose(updates[2], (updates[0] + updates[1]) / 2, atol=1e-6)

    adapted = _logits(model)
    assert torch.allclose(_logits(paradigm.export(model)), adapted, atol=1e-5)
