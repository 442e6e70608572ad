"""The ravan-matched preset exchanges as many numbers as the lora preset on the same layers of the built-in base."""

from __future__ import annotations

from pathlib import Path

from client_agent.paradigms import client_paradigm
from geofed.config import FederationConfig
from geofed_apps.finetune.base_model import BASE_MODEL
from geofed_apps.finetune.preset import preset_settings, with_base_targets


def _counts(preset: str) -> tuple[int, int]:
    """(exchanged, trainable) parameter counts of `preset`'s paradigm on the built-in base's architecture."""
    settings = with_base_targets(preset_settings(preset, Path("base")), "base")
    fed = FederationConfig.model_validate({"model": BASE_MODEL, "paradigm": settings["paradigm"]})
    paradigm = client_paradigm(fed.paradigm)
    model = paradigm.prepare(paradigm.build(fed, initialise=True))
    named = list(model.named_parameters())
    return (sum(p.numel() for n, p in named if paradigm.exchanged(n, p)),
            sum(p.numel() for n, p in named if paradigm.trainable(n, p)))


def test_ravan_matched_exchanges_loras_count_on_the_same_layers():
    lora, ravan = _counts("lora"), _counts("ravan-matched")
    wrapped = BASE_MODEL["n_layer"] * 4  # c_attn, c_fc and both c_proj (attention's and the MLP's)
    n = BASE_MODEL["n_embd"]
    # LoRA rank 16: 16·(in + out) per layer, c_attn n→3n, attn c_proj n→n, c_fc n→4n, mlp c_proj 4n→n.
    expected = BASE_MODEL["n_layer"] * 16 * (4 * n + 2 * n + 5 * n + 5 * n)

    assert lora == (expected, expected)
    assert ravan[0] == expected  # heads·r² = 8·32² per wrapped layer
    assert ravan[1] == expected + 8 * wrapped  # plus one trained scaling per head, never exchanged
    assert _counts("ravan")[0] * 7 < expected  # today's ravan preset: an eighth of LoRA's budget
