"""Turn the client's expected failures into one readable line and a non-zero exit, never a bare traceback."""

from __future__ import annotations

import logging
import sys

from geofed.config import ClientConfig

log = logging.getLogger("geofed.client")


def run_with_readable_errors(prog: str, cfg: ClientConfig) -> int:
    """Run the agent; map known errors to exit codes (2 bad input, 3 PS/auth, 4 disk)."""
    from .agent import ClientAgent
    from .checkpoint import CheckpointError
    from .corpus import CorpusError
    from .data import DataError
    from .model import ModelConfigError
    from .ps_client import JoinError, PushError
    from .tokenizer import TokenizerError

    try:
        return ClientAgent(cfg).run()
    except (DataError, CorpusError, ModelConfigError, TokenizerError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except (JoinError, PushError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 3
    except CheckpointError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        return 130
