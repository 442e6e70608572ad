"""The client's expected failures and the exit code each earns: 2 bad input, 3 PS or auth, 4 disk.

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class JoinError(Exception):
    """Could not join: bad/used/expired token or unreachable PS; the message says which."""


class SiteError(ValueError):
    """This site cannot run what the federation asks (its device, its client's paradigms); one readable line."""


class StaleDeltaError(Exception):
    """The PS refused the delta as too stale: fetch the current model and train again."""


class DeferredDeltaError(Exception):
    """The PS took nothing of the delta for now: its site's deltas in the open round already add up to the
    site's bound. The client retrains on a newer model, made once other sites have pushed."""


class PushError(Exception):
    """The PS refused the push for a reason retrying cannot fix."""


def expected_errors() -> dict[type[Exception], int]:
    """Each expected error type and its exit code (imported here, when needed: the types pull in torch)."""
    from .checkpoint import CheckpointError
    from .corpus import CorpusError
    from .data import DataError
    from .model import ModelConfigError
    from .precision import PrecisionError
    from .tokenizer import TokenizerError

    return {DataError: 2, CorpusError: 2, ModelConfigError: 2, TokenizerError: 2, PrecisionError: 2,
            SiteError: 2, JoinError: 3, PushError: 3, CheckpointError: 4}


def exit_code_for(exc: Exception) -> int | None:
    """The exit code of an expected failure; None for anything else."""
    return next((code for kind, code in expected_errors().items() if isinstance(exc, kind)), None)
