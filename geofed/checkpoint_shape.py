"""A federation's model shape as its checkpoint has it: `model.path`'s own `config.json`, read as JSON.

With `model.path` set, the checkpoint decides the family, depth, width, heads, vocabulary and longest context;
settings that said otherwise would describe a model nobody trains (the banner, the status page, the vocabulary
check a client's tokenizer goes through). A value the settings state and the checkpoint contradicts is refused
naming both; an unstated one is taken from the checkpoint. `block_size` may be stated shorter than the
checkpoint's context (training on shorter windows), never longer. Filled into the settings data before they
are validated (`geofed local`, `geofed ps`, `geofed export`), so a paradigm's layer names are checked against
the loaded family and the PS and every client see the loaded shape; no torch or transformers needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from geofed.cli_flags import SettingsError

# ModelConfig field -> the config.json keys that hold it, by family (Llama-style names first, GPT-2's second).
_KEYS = {
    "n_layer": ("num_hidden_layers", "n_layer"),
    "n_head": ("num_attention_heads", "n_head"),
    "n_embd": ("hidden_size", "n_embd"),
    "vocab_size": ("vocab_size",),
    "block_size": ("max_position_embeddings", "n_positions"),
}
_FAMILIES = {"llama": "llama", "gpt2": "gpt2"}  # config.json model_type -> model.family


class CheckpointShapeError(SettingsError):
    """The settings contradict `model.path`'s config.json, or it cannot be read; one readable line."""


def checkpoint_shape(path: str) -> dict[str, Any] | None:
    """The ModelConfig fields `path`'s config.json decides (with the key each came from); None without one."""
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return None  # not on this machine (a PS without the checkpoint): the clients' model build checks it
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointShapeError(f"cannot read {str(config)!r}: {exc}") from None
    if not isinstance(raw, dict):
        raise CheckpointShapeError(f"{str(config)!r} is not a JSON object")
    found: dict[str, Any] = {}
    family = _FAMILIES.get(str(raw.get("model_type", "")))
    if family is not None:
        found["family"] = (family, "model_type")
    for field, keys in _KEYS.items():
        key = next((k for k in keys if isinstance(raw.get(k), int)), None)
        if key is not None:
            found[field] = (raw[key], key)
    return found


def _contradicts(field: str, stated: Any, loaded: Any) -> bool:
    return stated > loaded if field == "block_size" else stated != loaded


def fill_checkpoint_shape(data: dict[str, Any]) -> dict[str, Any]:
    """Settings data (before validation) with the model's shape taken from `model.path`'s config.json (see the
    module docstring): every setting that depends on the model (a paradigm's layer names) is then validated
    against the loaded shape. `data` itself when there is no path or no config.json here; CheckpointShapeError
    names a contradiction."""
    model = data.get("model") or {}
    path = model.get("path") if isinstance(model, dict) else None
    shape = checkpoint_shape(str(path)) if path else None
    if not shape:
        return data
    differing = [
        f"model.{field} {model[field]!r} is stated but the checkpoint's config.json has {key} {value!r}"
        for field, (value, key) in shape.items()
        if field in model and _contradicts(field, model[field], value)
    ]
    if differing:
        raise CheckpointShapeError(
            f"the settings contradict model.path {path!r}: {'; '.join(differing)}; drop the setting (it is "
            "read from the checkpoint) or point model.path at the checkpoint you mean"
        )
    filled = {field: value for field, (value, _) in shape.items() if field not in model}
    return {**data, "model": {**model, **filled}} if filled else data
