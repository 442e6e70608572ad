"""What every paradigm's settings share: the discriminating `name` (Algorithm 1, steps 3 and 13)."""

from __future__ import annotations

from typing import Any

from geofed.settings_base import Section


class ParadigmSettings(Section):
    """Base of one paradigm's settings; subclasses narrow `name` to a Literal and add their own fields.

    A paradigm is two plug-ins named alike: a client half in `client_agent/paradigms/<name>.py` (how the
    model is reparametrised and what is exchanged) and a server half in
    `ps_server/aggregation/strategies/<name>.py` (how the exchanged vector is aggregated and published).
    """

    name: str

    def check_model(self, model: Any) -> None:
        """Refuse (ValueError naming the setting) settings that cannot fit `model` (a `ModelConfig`)."""
        return None
