"""Codecs, outer optimizers and paradigms from outside geofed: the modules `GEOFED_PLUGINS` names, imported once.

A codec or outer optimizer enters its registries by being declared (`geofed.codec_specs.CodecSpec` and a
`geofed.codec.base.Codec` subclass; `geofed.outer_optimizers.OuterSpec` and a
`ps_server.aggregation.outer.OuterOptimizer` subclass), a paradigm by its settings class naming its halves
(`geofed.paradigms.ParadigmSettings`), and the settings derive their lists of names from the specs and
settings classes when `geofed.config` is first imported. So a module that declares
one must be imported before that: `geofed` commands (`geofed_apps`) call `load_plugins` first, and every
process they start inherits the variable. A module that declares names must import no geofed layer that
reads the settings before its declarations run; put a PS step in a module of its own, listed after.
"""

from __future__ import annotations

import importlib
import logging
import os

log = logging.getLogger(__name__)

ENV = "GEOFED_PLUGINS"


def plugin_modules(value: str | None) -> list[str]:
    """The module names in a `GEOFED_PLUGINS` value: comma-separated, blanks ignored."""
    return [name.strip() for name in (value or "").split(",") if name.strip()]


def load_plugins() -> list[str]:
    """Import every module `GEOFED_PLUGINS` names, in order; an unimportable one stops the command with its
    name (ImportError), since the settings would otherwise refuse the names it declares without saying why."""
    names = plugin_modules(os.environ.get(ENV))
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(f"{ENV}: cannot import plugin module {name!r}: {exc}") from exc
        log.info("event=plugin_loaded module=%s", name)
    return names
