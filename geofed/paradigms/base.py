"""What every paradigm's settings share: the discriminating `name` (Algorithm 1, steps 3 and 13)."""

from __future__ import annotations

from typing import Any, ClassVar

from geofed.settings_base import Section


class ParadigmSettings(Section):
    """Base of one paradigm's settings; subclasses narrow `name` to a Literal and add their own fields.

    A paradigm is two plug-ins named alike: a client half in `client_agent/paradigms/<name>.py` (how the
    model is reparametrised and what is exchanged) and a server half in
    `ps_server/aggregation/strategies/<name>.py` (how the exchanged vector is aggregated and published).

    Capabilities are class attributes every reader asks (config validation, the operator's admission
    rules and builders, the launcher, the PS's guard), so a new paradigm declares them here, never in a
    list elsewhere:

    - `elementwise`: the exchanged vector is plain parameters of the model, folded element by element
      (the dense weighted mean): it may be split element-wise across PS shards (`ps_shards > 1`) and
      across a site's ranks.
    - `needs_trainer`: the paradigm needs a server-side trainer process next to the PS (split learning).
    - `cumulative`: successive deltas of one site live in one space, so what they add up to means
      something and is bounded (the displacement budget); False when each round's update lies along that
      round's own directions.
    - `transformers_model`: the client half wraps the model with a library that takes only transformers
      models (peft), so the client builds transformers' implementation of the family even where it has
      its own (`client_agent.gpt2`, which starts seconds sooner).
    """

    name: str
    elementwise: ClassVar[bool] = False
    needs_trainer: ClassVar[bool] = False
    cumulative: ClassVar[bool] = True
    transformers_model: ClassVar[bool] = False

    def update_ceiling(self, model: Any) -> float | None:
        """The largest L2 norm an honest client's exchanged update can have, when the paradigm fixes it by its
        own settings (`model`: the `ModelConfig`); None: the inner optimizer's step bounds it (the default)."""
        return None

    def folds_as_mean(self) -> bool:
        """Whether the PS folds this paradigm's updates as a mean of the sites' vectors, so that clipping each
        site's update and adding Gaussian noise to that mean gives site-level differential privacy."""
        return self.elementwise

    def check_model(self, model: Any) -> None:
        """Refuse (ValueError naming the setting) settings that cannot fit `model` (a `ModelConfig`)."""
        return None
