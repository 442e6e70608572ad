"""A paradigm geofed does not ship, declared once by its settings: train and exchange the bias vectors only.

Its halves are `tests.plugins.biases_client` and `tests.plugins.biases_ps`, found from the paths below; so
`GEOFED_PLUGINS=tests.plugins.biases` makes it a paradigm every geofed process of a federation knows
(`geofed.plugins`), and `geofed local --paradigm biases` fine-tunes with its preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from geofed.paradigms import ParadigmSettings


class BiasesSettings(ParadigmSettings):
    """Every `*.bias` parameter trained and exchanged; the rest stays as every client builds it."""

    name: Literal["biases"] = Field("biases", description="Train and exchange the bias vectors only.")
    client_half: ClassVar[str] = "tests.plugins.biases_client:Biases"
    strategies: ClassVar[Mapping[str, str]] = {"dense": "tests.plugins.biases_ps:Biases"}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {"biases": {"training": {"lr": 1e-2}}}
    elementwise: ClassVar[bool] = True
