"""Checks of this site's tokenizer, data and device against the federation, run before a one-time token is spent.

The client learns the federation from a Join preview (`PSClient.preview`), which leaves the token unused, so
any refusal here can be fixed and relaunched with the same token. What only building the model can show (a
pretrained checkpoint that does not load, a paradigm that exchanges nothing of it) is found while the model
builds, which runs beside the Join; the rejoin token saved at Join serves the relaunch after such an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from geofed.config import ClientConfig, FederationConfig

from .data.files import Examples, TrainingData
from .data.streams import Stream, open_stream
from .data.tokenizer import Tokenizer, check_vocab
from .errors import SiteError
from .paradigms import ClientParadigm, ParadigmError, client_paradigm
from .training.model import check_model_source
from .training.precision import Precision, pick_precision


class DeviceError(SiteError):
    """The requested torch device is not on this machine; one readable line."""


@dataclass(frozen=True)
class Checked:
    """What the checks built, reused by the site's set-up."""

    paradigm: ClientParadigm
    precision: Precision
    stream: Stream


def check_device(device: torch.device) -> None:
    """Refuse a CUDA device this machine does not have (torch would fail only at the first tensor moved)."""
    if device.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise DeviceError(f"device {str(device)!r} requested but this machine has no CUDA device (use cpu or auto)")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise DeviceError(f"device {str(device)!r} requested but this machine has {torch.cuda.device_count()} GPU(s)")


def check_data_kind(paradigm: ClientParadigm, data: TrainingData, flag: str) -> None:
    """Refuse data of a kind the paradigm does not train on: preference records (prompt, chosen, rejected)
    for one that trains on text or prompt/completion records, and any other data for one that trains on
    preferences (`ClientParadigm.preference_data`)."""
    examples = data if isinstance(data, Examples) else None
    has_preferences = examples is not None and examples.preferences
    if paradigm.preference_data and not has_preferences:
        held = f"{examples.where(0)} is a prompt/completion record" if examples is not None else "it holds text"
        raise SiteError(f"paradigm {paradigm.name!r} trains on preference records (prompt, chosen, rejected); "
                        f"{flag}: {held}")
    if has_preferences and not paradigm.preference_data:
        raise SiteError(f"{examples.where(0)}: a preference record (prompt, chosen, rejected), but paradigm "
                        f"{paradigm.name!r} trains on text or prompt/completion records ({flag})")


def check_before_join(
    cfg: ClientConfig, fed: FederationConfig, tokenizer: Tokenizer, data: TrainingData, device: torch.device,
    eval_data: TrainingData | None = None,
) -> Checked:
    """Every check of this site against `fed` that needs no model; raises the first failure's one-line error.
    `eval_data` (`cfg.eval_data`'s) is held out instead of the tail of `data`."""
    check_vocab(tokenizer, fed.model.vocab_size)
    try:
        paradigm = client_paradigm(fed.paradigm)
    except ParadigmError as exc:
        raise SiteError(str(exc)) from None
    check_data_kind(paradigm, data, "--data")
    if eval_data is not None:
        check_data_kind(paradigm, eval_data, "--eval-data")
    check_model_source(fed.model)
    check_device(device)
    precision = pick_precision(fed.training.precision, device)
    stream = open_stream(data, fed.model.block_size, seed=cfg.seed, eval_data=eval_data,
                         eval_fraction=fed.training.eval_fraction)
    return Checked(paradigm, precision, stream)
