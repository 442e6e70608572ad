"""The exit code each expected failure earns: 2 bad input, 3 PS or auth, 4 disk.

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from .errors import JoinError, PushError, SiteError


def expected_errors() -> dict[type[Exception], int]:
    """Each expected error type and its exit code (imported here, when needed: the types pull in torch)."""
    from .data.corpus import CorpusError
    from .data.files import DataError
    from .data.tokenizer import TokenizerError
    from .training.checkpoint import CheckpointError
    from .training.model import ModelConfigError
    from .training.precision import PrecisionError

    return {DataError: 2, CorpusError: 2, ModelConfigError: 2, TokenizerError: 2, PrecisionError: 2,
            SiteError: 2, JoinError: 3, PushError: 3, CheckpointError: 4}


def exit_code_for(exc: Exception) -> int | None:
    """The exit code of an expected failure; None for anything else."""
    return next((code for kind, code in expected_errors().items() if isinstance(exc, kind)), None)
