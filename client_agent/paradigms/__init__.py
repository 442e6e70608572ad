"""Client halves of the training paradigms, one module each, found from the settings that name them
(`ParadigmSettings.client_half`)."""

from __future__ import annotations

from geofed.paradigms import PARADIGMS, ParadigmSettings, import_half

from .base import ClientParadigm, ParadigmError


def client_paradigm(settings: ParadigmSettings) -> ClientParadigm:
    """The client half for the federation's paradigm settings."""
    path = type(settings).client_half
    if not path:
        raise ParadigmError(f"this client has no implementation of paradigm {settings.name!r}; "
                            f"known: {', '.join(sorted(PARADIGMS))}")
    try:
        half = import_half(path)
    except (ImportError, AttributeError) as exc:
        raise ParadigmError(f"this client cannot load paradigm {settings.name!r}'s client half {path!r}: "
                            f"{exc}") from exc
    return half(settings)


__all__ = ["ClientParadigm", "ParadigmError", "client_paradigm"]
