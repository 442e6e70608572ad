"""What every paradigm's settings share: the discriminating `name` (Algorithm 1, steps 3 and 13), and the one
declaration of a paradigm (`PARADIGMS`): its settings class names its halves and presets."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from geofed.settings_base import Section

PARADIGMS: dict[str, type[ParadigmSettings]] = {}
"""Every paradigm a federation can name (`paradigm.name`), in declaration order: a `ParadigmSettings` subclass
that names its client half enters it by being defined."""


class ParadigmSettings(Section):
    """Base of one paradigm's settings; subclasses narrow `name` to a Literal and add their own fields.

    A paradigm is declared once, here: its settings class names, as 'module:Class' paths the layers above
    import when they need them, its two halves and, optionally, its fine-tuning presets:

    - `client_half`: a `client_agent.paradigms.base.ClientParadigm` (how the model is reparametrised and
      what is exchanged). Naming it makes the class a paradigm (`PARADIGMS`); a base of several paradigms
      (`AdapterSettings`) names none.
    - `strategies`: the PS's `Strategy` (how the exchanged vector is aggregated and published) for each
      delta form it folds (`CodecConfig.delta_form`: 'dense', or 'sparse' for a sparse codec's top-k deltas).
    - `presets`: what `geofed local --paradigm PRESET` fine-tunes the cached base model with, by preset
      name: settings merged over the fine-tuning task's common ones (`paradigm.name` is this paradigm's).
    - `local_task`: the task its presets train and score, when not the docstring task's
      (`geofed_apps.finetune.preset.FinetuneTask`): a class of the same `write`/`score_*` methods whose
      `summary_lines(before, after)` gives the run's closing lines, and `read_user`/`write_user` for
      `--data` (the user's records checked before anything starts, then written per client).

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
      its own (`client_agent.training.gpt2`, which starts seconds sooner).
    """

    name: str
    client_half: ClassVar[str] = ""
    strategies: ClassVar[Mapping[str, str]] = {}
    presets: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    local_task: ClassVar[str] = ""
    elementwise: ClassVar[bool] = False
    needs_trainer: ClassVar[bool] = False
    cumulative: ClassVar[bool] = True
    transformers_model: ClassVar[bool] = False

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.client_half:
            return
        name = cls.model_fields["name"].default
        if PARADIGMS.setdefault(name, cls) is not cls:
            raise ValueError(f"paradigm {name!r} is declared twice ({PARADIGMS[name].__qualname__}, "
                             f"{cls.__qualname__})")

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


def import_half(path: str) -> Any:
    """The class a 'module:Class' path of `ParadigmSettings` names, its module imported now: the halves live in
    the layers above this one, which import them by the path their paradigm's settings give."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
