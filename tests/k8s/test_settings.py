"""Operator settings: defaults < settings file (camelCase) < GEOFED_OPERATOR_* environment."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from geofed_operator.settings import OperatorSettings, load_settings


def test_precedence(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("siteIntervalSeconds: 5\npsImage: lab/ps:1\n")
    settings = load_settings(path, environ={"GEOFED_OPERATOR_SITE_INTERVAL_S": "2"})
    assert (settings.site_interval_s, settings.ps_image) == (2.0, "lab/ps:1")
    assert settings.status_interval_s == OperatorSettings().status_interval_s
    assert load_settings(environ={}) == OperatorSettings()


@pytest.mark.parametrize(
    ("text", "env", "match"),
    [
        ("siteIntervalSeconds: 0\n", {}, "site_interval_s"),
        ("unknownKey: 1\n", {}, "unknownKey"),
        ("- a list\n", {}, "must hold a mapping"),
        ("", {"GEOFED_OPERATOR_ADMIN_TIMEOUT_S": "soon"}, "admin_timeout_s"),
    ],
)
def test_bad_settings_name_the_field(tmp_path: Path, text: str, env: dict[str, str], match: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    with pytest.raises((ValidationError, ValueError), match=match):
        load_settings(path, environ=env)
