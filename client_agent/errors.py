"""The client's own expected failures: joining, pushing, and what a site cannot run.

Each earns an exit code (`client_agent.exit_codes`); anything else is a bug and keeps its traceback.
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
