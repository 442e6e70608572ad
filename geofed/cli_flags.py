"""Command-line flags derived from the settings models, so the CLI never drifts from `geofed.config`."""

from __future__ import annotations

import argparse
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

# The settings-file counterpart of examples/federation.yaml (a Kubernetes Federation), for `geofed ps --federation`.
PLAIN_EXAMPLE = "examples/federation-settings.yaml"


class SettingsError(ValueError):
    """Settings could not be loaded; the message names the file or key and the problem."""


def command_parser(prog: str, description: str, *subsystems: Any) -> argparse.ArgumentParser:
    """A parser with one subcommand per `add_commands(subparsers)` of each of `subsystems` (cli modules)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for subsystem in subsystems:
        subsystem.add_commands(sub)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse `argv` and run the chosen subcommand's handler; its exit code."""
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default_text(field) -> str:
    """`required`, or the default as a user would type it (never pydantic's PydanticUndefined)."""
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "default: none"
    if isinstance(default, bool):
        return "default: on" if default else "default: off"
    return f"default: {default}"


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel], *, exclude: tuple[str, ...] = ()) -> None:
    """One `--kebab-case` flag per field of a flat settings model; help comes from its description."""
    for name, field in model.model_fields.items():
        if name in exclude:
            continue
        ann = field.annotation
        help_text = f"{field.description} ({_default_text(field)})"
        if ann is bool:
            parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
            continue
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text}
        origin = typing.get_origin(ann)
        if origin is Literal:
            kwargs["choices"] = list(typing.get_args(ann))
        elif ann in (int, float, str):
            kwargs["type"] = ann
        elif origin in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(ann) if a is not type(None)]
            kwargs["type"] = inner[0] if len(inner) == 1 and inner[0] in (int, float, str) else str
        parser.add_argument(_flag(name), **kwargs)


def model_from_flags(model: type[BaseModel], args: argparse.Namespace, base: dict | None = None) -> BaseModel:
    """Build `model` from defaults < `base` < flags that were given."""
    data = dict(base or {})
    for name in model.model_fields:
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(_readable(exc)) from exc


def _readable(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return "invalid settings: " + "; ".join(parts)


def load_settings_file(path: str | None) -> dict:
    """A YAML or JSON settings file as a dict ({} when no path)."""
    if not path:
        return {}
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {p}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text) if p.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise SettingsError(f"cannot parse settings file {p}: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {p} must hold a mapping")
    if {"apiVersion", "kind", "spec"} <= data.keys():
        raise SettingsError(
            f"{p} is a Kubernetes {data['kind']} resource, not a settings file: apply it with kubectl, or give "
            f"FederationConfig settings such as {PLAIN_EXAMPLE} (the resource's spec sections, snake_case keys)"
        )
    return data


def apply_overrides(data: dict, overrides: list[str] | None) -> dict:
    """Apply `--set section.key=value` overrides (values parsed as YAML scalars)."""
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"--set expects section.key=value, got {item!r}")
        node = data
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SettingsError(f"--set {key}: {part} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data


def validate_settings(model: type[BaseModel], data: dict) -> BaseModel:
    """Validate a dict against a settings model with a one-line error."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(_readable(exc)) from exc
