"""The single error type of the delta codec, so callers can tell bad payloads from their own bugs."""

from __future__ import annotations


class CodecError(ValueError):
    """A header, frame or argument the codec cannot accept; the message names exactly what was wrong.

    Subclasses `ValueError` so generic input validation (`except ValueError`) also catches it.
    """
