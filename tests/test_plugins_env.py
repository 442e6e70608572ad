"""`GEOFED_PLUGINS` names the modules every geofed command imports first; a wrong name stops it, naming it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from geofed.plugins import load_plugins, plugin_modules


def test_the_variable_is_a_comma_separated_list():
    assert plugin_modules(" a.b , ,c ") == ["a.b", "c"] and plugin_modules(None) == []


def test_an_unimportable_module_is_named(monkeypatch):
    monkeypatch.setenv("GEOFED_PLUGINS", "tests.plugins.fp16_codec,no_such_plugin")
    with pytest.raises(ImportError, match="GEOFED_PLUGINS: cannot import plugin module 'no_such_plugin'"):
        load_plugins()


def test_a_geofed_command_knows_a_plugin_codec(monkeypatch):
    """The settings of a `geofed` process list the codec a plug-in module declares."""
    monkeypatch.setenv("GEOFED_PLUGINS", "tests.plugins.fp16_codec")
    out = subprocess.run([sys.executable, "-c", "import geofed_apps; from geofed.config import CodecConfig; "
                          "print(CodecConfig(name='fp16').delta_form)"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "dense", out.stderr[-2000:]
