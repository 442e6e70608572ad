"""BitFit (Ben Zaken et al., 2022): only bias vectors (and, optionally, layer norms) are trained and exchanged.

The frozen weights must be identical on every client: they come from `model.path` (a pretrained base,
e.g. a `geofed local` run's final_model/) or, without one, from the seeded initialisation every client
builds alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from .base import ParadigmSettings


class BitFitSettings(ParadigmSettings):
    """Bias-only fine-tuning."""

    name: Literal["bitfit"] = Field("bitfit", description="BitFit: train and exchange bias vectors only.")
    client_half: ClassVar[str] = "client_agent.paradigms.bitfit:BitFit"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "ps_server.aggregation.strategies.bitfit:BitFit"}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {"bitfit": {"training": {"lr": 1e-2}}}
    elementwise: ClassVar[bool] = True
    layer_norms: bool = Field(
        True, description="Also train and exchange the layer norms' weights (scale vectors), as is common with BitFit."
    )
