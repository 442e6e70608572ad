"""Per-paradigm settings, one module each; `ParadigmConfig` is their discriminated union (on `name`).

Adding a paradigm: a settings module here (and its entry below), declaring its capabilities on the class
(`ParadigmSettings`: elementwise, needs_trainer, cumulative, transformers_model, update_ceiling), a client half in
`client_agent/paradigms/` and a server half in `ps_server/aggregation/strategies/` (its entry in
`STRATEGY_CLASSES`). Nothing else changes: readers ask the capabilities (`paradigms_with`), never a name.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from .base import ParadigmSettings
from .bitfit import BitFitSettings
from .fsl_sage import FslSageSettings
from .hybrid_lora import HybridLoRASettings
from .lora import LoRASettings
from .pretrain import PretrainSettings
from .ravan import RavanSettings
from .zo import ZOSettings

# The one list of known paradigms' settings; the CRD and Helm schemas are generated from this union.
PARADIGM_SETTINGS: tuple[type[ParadigmSettings], ...] = (
    PretrainSettings, BitFitSettings, LoRASettings, HybridLoRASettings, RavanSettings, ZOSettings,
    FslSageSettings,
)

ParadigmConfig = Annotated[Union[PARADIGM_SETTINGS], Field(discriminator="name")]  # noqa: UP007

PARADIGM_NAMES: tuple[str, ...] = tuple(s.model_fields["name"].default for s in PARADIGM_SETTINGS)


def paradigms_with(capability: str, settings: tuple[type[ParadigmSettings], ...] = PARADIGM_SETTINGS
                   ) -> tuple[str, ...]:
    """Names of the paradigms whose settings declare `capability` (a `ParadigmSettings` class attribute)."""
    if not isinstance(getattr(ParadigmSettings, capability, None), bool):
        raise ValueError(f"{capability!r} is not a paradigm capability (a bool class attribute of ParadigmSettings)")
    return tuple(s.model_fields["name"].default for s in settings if getattr(s, capability))


__all__ = ["PARADIGM_NAMES", "PARADIGM_SETTINGS", "ParadigmConfig", "ParadigmSettings", "paradigms_with"]
