"""Per-paradigm settings, one module each; `paradigm_union` is their discriminated union (on `name`).

Adding a paradigm: a settings module here, whose `ParadigmSettings` subclass names its client half and its
server half (and presets), declaring its capabilities on the class (elementwise, needs_trainer, cumulative,
transformers_model, update_ceiling); a client half in `client_agent/paradigms/` and a server half in
`ps_server/aggregation/strategies/`. Nothing else changes: every module of this package is imported here, so
its settings are in `PARADIGMS`; readers ask the capabilities (`paradigms_with`), never a name. From outside
geofed, the settings module is listed in `GEOFED_PLUGINS` (`geofed.plugins`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Annotated, Any, Union

from pydantic import Field

from .base import PARADIGMS, ParadigmSettings, import_half
from .pretrain import PretrainSettings  # the default paradigm, first in every list of them

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def paradigm_union(settings: Iterable[type[ParadigmSettings]] | None = None) -> Any:
    """The settings' discriminated union on `name` (every declared paradigm's, by default): what
    `FederationConfig.paradigm` holds; the CRD and Helm schemas are generated from it."""
    members = tuple(PARADIGMS.values() if settings is None else settings)
    return Annotated[Union[members], Field(discriminator="name")]  # noqa: UP007


def paradigms_with(capability: str, settings: Iterable[type[ParadigmSettings]] | None = None) -> tuple[str, ...]:
    """Names of the paradigms (every declared one, by default) whose settings declare `capability` (a
    `ParadigmSettings` class attribute)."""
    if not isinstance(getattr(ParadigmSettings, capability, None), bool):
        raise ValueError(f"{capability!r} is not a paradigm capability (a bool class attribute of ParadigmSettings)")
    members = PARADIGMS.values() if settings is None else settings
    return tuple(s.model_fields["name"].default for s in members if getattr(s, capability))


__all__ = ["PARADIGMS", "ParadigmSettings", "PretrainSettings", "import_half", "paradigm_union", "paradigms_with"]
