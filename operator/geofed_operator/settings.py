"""Operator settings: one pydantic model, read from a YAML file (the chart's ConfigMap) and the environment.

Precedence: environment (`GEOFED_OPERATOR_<FIELD>`, e.g. `GEOFED_OPERATOR_SITE_INTERVAL_S=1`) > settings
file (camelCase keys, `--settings` / `GEOFED_OPERATOR_SETTINGS`) > defaults. The chart's `settings`
values are this model too (`charts/geofed/values.schema.json` is generated from it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field

from geofed_operator.k8s_types import K8sModel
from geofed_operator.keys import from_k8s_keys

ENV_PREFIX = "GEOFED_OPERATOR_"
SETTINGS_FILE_ENV = f"{ENV_PREFIX}SETTINGS"
Role = Literal["cloud", "site", "both"]
DEFAULT_TAG = "0.1.0"


class OperatorSettings(K8sModel):
    """What the operator needs beyond the custom objects themselves."""

    ps_image: str = Field(
        f"ghcr.io/geofed/ps:{DEFAULT_TAG}",
        max_length=512,
        description="PS image for Federations that name none.",
    )
    client_image: str = Field(
        f"ghcr.io/geofed/client:{DEFAULT_TAG}",
        max_length=512,
        description="Client image for SiteClients that name none.",
    )
    status_interval_s: float = Field(
        15.0, gt=0, le=3600, description="Seconds between polls of each PS's status (Federation .status)."
    )
    site_interval_s: float = Field(
        10.0, gt=0, le=3600, description="Seconds between checks of each SiteClient's Job and pods."
    )
    admin_timeout_s: float = Field(10.0, gt=0, le=300, description="Deadline of one PS admin call.")
    force_delete_after_s: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="Site role: force-delete a client pod still terminating this long after its grace period ended "
        "(its node is lost or NotReady), so the next attempt can start; 0 never force-deletes.",
    )
    ps_address_override: str | None = Field(
        None,
        max_length=261,
        description="Cloud role: dial each PS admin API here, not its Service DNS name (tests, debugging).",
    )


def load_settings(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> OperatorSettings:
    """Defaults, then the YAML file (if any), then `GEOFED_OPERATOR_*` variables; errors name the field."""
    env = os.environ if environ is None else environ
    data: dict[str, object] = {}
    path = path or env.get(SETTINGS_FILE_ENV)
    if path:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"operator settings file {path} must hold a mapping, not {type(loaded).__name__}")
        data.update(from_k8s_keys(OperatorSettings, loaded))
    for name in OperatorSettings.model_fields:
        value = env.get(f"{ENV_PREFIX}{name.upper()}")
        if value is not None:
            data[name] = value
    return OperatorSettings.model_validate(data)
