"""The settings `geofed local` starts from and the deep merge its presets, files and `--set` go through.

Kept apart from `geofed_apps.local` so the fine-tuning presets (`geofed_apps.finetune`), which
`geofed local --paradigm` loads, can build on them without importing the launcher back.
"""

from __future__ import annotations

import json
from typing import Any

# `geofed local` runs the federation defaults (geofed/config.py), the same ones `geofed ps` starts with:
# the default model is the small one that fits 2 CPU cores shared by N clients and the PS.
LOCAL_DEFAULTS: dict = {"name": "local"}


def merge_settings(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep merge of settings mappings; `override` wins, nested sections merge key by key."""
    out = json.loads(json.dumps(base))
    for key, value in override.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge_settings(out[key], value) if both else value
    return out


def fill_run_duration(settings: dict[str, Any], duration_s: float) -> dict[str, Any]:
    """With training.lr_progress run_time and no run_duration_s given, the run's length is `duration_s`
    (`geofed local --duration`): the inner learning rate reaches its floor as the run ends."""
    training = settings.get("training")
    if isinstance(training, dict) and training.get("lr_progress") == "run_time" and not training.get("run_duration_s"):
        training["run_duration_s"] = float(duration_s)
    return settings
