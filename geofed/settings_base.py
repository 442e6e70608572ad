"""The base every settings section derives from (kept apart so paradigm settings can import it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for every settings section: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
