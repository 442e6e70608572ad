"""BitFit's two halves without a socket: what the client trains and exchanges, what the PS accepts."""

from __future__ import annotations

import pytest
import torch

from client_agent.paradigms import ParadigmError, client_paradigm
from geofed.config import FederationConfig
from geofed.manifest import TensorEntry
from ps_server.aggregation.strategies import build_strategy

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32}


def _fed(family: str = "gpt2", **paradigm) -> FederationConfig:
    return FederationConfig.model_validate({"model": {"family": family, **TINY},
                                            "paradigm": {"name": "bitfit", **paradigm}})


def _gpt2_bias_and_norm_names(model: torch.nn.Module) -> set[str]:
    """Independent of the plug-in: GPT-2's naming (`*.bias`, layer norms `ln_*`) says what BitFit trains."""
    return {n for n, _ in model.named_parameters() if n.endswith(".bias") or ".ln_" in n}


def test_bitfit_trains_and_exchanges_exactly_the_biases_and_layer_norms():
    fed = _fed()
    paradigm = client_paradigm(fed.paradigm)

    model = paradigm.prepare(paradigm.build(fed, initialise=False))

    expected = _gpt2_bias_and_norm_names(model)
    assert {t.name for t in paradigm.manifest(model)} == expected
    assert {n for n, p in model.named_parameters() if p.requires_grad} == expected
    assert "transformer.wte.weight" not in expected and all(len(t.shape) == 1 for t in paradigm.manifest(model))
    assert paradigm.private_state(model) == {}  # nothing trained is kept back from the PS


def test_bitfit_builds_the_frozen_weights_identically_on_every_client():
    fed = _fed()
    a, b = client_paradigm(fed.paradigm), client_paradigm(fed.paradigm)

    ma = a.prepare(a.build(fed, initialise=False))  # a non-master: no uninitialised shell for BitFit
    mb = b.prepare(b.build(fed, initialise=True))

    for (name, pa), (_, pb) in zip(ma.named_parameters(), mb.named_parameters(), strict=True):
        assert torch.equal(pa, pb), name


def test_bitfit_without_layer_norms_exchanges_biases_only():
    fed = _fed(layer_norms=False)
    paradigm = client_paradigm(fed.paradigm)

    model = paradigm.prepare(paradigm.build(fed, initialise=False))

    assert {t.name for t in paradigm.manifest(model)} == {n for n, _ in model.named_parameters() if n.endswith(".bias")}


def test_bitfit_on_a_model_without_biases_or_norms_to_train_is_refused():
    fed = _fed(family="llama", layer_norms=False)  # Llama's linear layers have no bias
    paradigm = client_paradigm(fed.paradigm)

    with pytest.raises(ParadigmError, match="exchanges no parameter"):
        paradigm.prepare(paradigm.build(fed, initialise=False))


def test_the_bitfit_strategy_refuses_a_weight_matrix_in_the_masters_layout():
    strategy = build_strategy(_fed())

    strategy.check_manifest((TensorEntry("h.0.ln_1.bias", (32,), "float32"),))
    with pytest.raises(ValueError, match=r"vectors only.*wte.weight \[257, 32\]"):
        strategy.check_manifest((TensorEntry("wte.weight", (257, 32), "float32"),))
