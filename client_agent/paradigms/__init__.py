"""Client halves of the training paradigms, one module each, found by the settings' `name`."""

from __future__ import annotations

from geofed.paradigms import ParadigmSettings

from .base import ClientParadigm, ParadigmError
from .bitfit import BitFit
from .fsl_sage import FslSage
from .hybrid_lora import HybridLoRA
from .lora import LoRA
from .pretrain import Pretrain
from .ravan import Ravan
from .zo import ZO

CLIENT_PARADIGMS: dict[str, type[ClientParadigm]] = {
    p.name: p for p in (Pretrain, BitFit, LoRA, HybridLoRA, Ravan, ZO, FslSage)
}


def client_paradigm(settings: ParadigmSettings) -> ClientParadigm:
    """The client half for the federation's paradigm settings."""
    try:
        return CLIENT_PARADIGMS[settings.name](settings)
    except KeyError:
        raise ParadigmError(
            f"this client has no implementation of paradigm {settings.name!r}; "
            f"known: {', '.join(sorted(CLIENT_PARADIGMS))}"
        ) from None


__all__ = ["CLIENT_PARADIGMS", "ClientParadigm", "ParadigmError", "client_paradigm"]
