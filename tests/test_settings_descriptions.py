"""Every setting's description, as `kubectl explain`, `helm show values` and `--help` print it, fits 300 characters:
what the setting does and its range; the algorithm behind it belongs in docs/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import geofed.config  # noqa: F401 - defines the settings sections
import geofed.paradigms  # noqa: F401 - and the paradigms' own
from geofed.settings_base import Section

REPO = Path(__file__).resolve().parents[1]
LIMIT = 300
SCHEMAS = [*sorted(REPO.glob("crds/geofed.io_*.yaml")), *sorted(REPO.glob("charts/geofed/crds/geofed.io_*.yaml")),
           REPO / "charts/geofed/values.schema.json"]  # fmt: skip


def _sections(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _sections(sub)


def _descriptions(node: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield path, value
            else:
                yield from _descriptions(value, f"{path}.{key}")
    elif isinstance(node, list):
        for item in node:
            yield from _descriptions(item, path)


def test_every_settings_field_says_it_in_300_characters():
    long = [f"{cls.__module__}.{cls.__name__}.{name}: {len(field.description)}"
            for cls in set(_sections(Section)) for name, field in cls.model_fields.items()
            if field.description and len(field.description) > LIMIT]  # fmt: skip
    assert not long, long


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_schema_description_fits_300_characters(schema):
    text = schema.read_text(encoding="utf-8")
    doc = json.loads(text) if schema.suffix == ".json" else list(yaml.safe_load_all(text))
    found = list(_descriptions(doc, schema.name))
    assert found, f"{schema} has no descriptions: the check would prove nothing"
    long = [f"{path}: {len(text)}" for path, text in found if len(text) > LIMIT]
    assert not long, long
