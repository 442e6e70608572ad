"""API errors shaped as the API server's `Status` objects (code, reason, message, details)."""

from __future__ import annotations

import json
from typing import Any

from kmock._internal import k8s


def status_error(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> k8s.KubernetesError:
    """An error kmock renders as a `Status` with exactly this code, reason, message and details."""
    return k8s.KubernetesError(status=code, reason=reason, message=message, details=details or {})


def qualified(plural: str, group: str) -> str:
    """`federations.geofed.io`, or `secrets` for the core group (the form messages use)."""
    return f"{plural}.{group}" if group else plural


def kind_qualified(kind: str, group: str) -> str:
    """`Federation.geofed.io`, or `Secret` for the core group (the form `is invalid` messages use)."""
    return f"{kind}.{group}" if group else kind


def go_value(value: Any) -> str:
    """How a field error prints its value (`"text"`, `42`, `true`, `null`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class FieldError:
    """One `field.Error`: its path, type and detail, printed as the API server prints it."""

    def __init__(self, path: str, kind: str, detail: str = "", value: Any = ..., shown: bool = True) -> None:
        self.path, self.kind, self.detail, self.value, self.shown = path, kind, detail, value, shown

    reasons = {
        "Invalid": ("FieldValueInvalid", "Invalid value"),
        "Required": ("FieldValueRequired", "Required value"),
        "NotSupported": ("FieldValueNotSupported", "Unsupported value"),
        "TooLong": ("FieldValueTooLong", "Too long"),
        "TooMany": ("FieldValueTooMany", "Too many"),
        "Forbidden": ("FieldValueForbidden", "Forbidden"),
        "Duplicate": ("FieldValueDuplicate", "Duplicate value"),
    }

    def __str__(self) -> str:
        label = self.reasons[self.kind][1]
        text = f"{self.path}: {label}"
        if self.value is not ... and self.shown:
            text += f": {go_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def cause(self) -> dict[str, Any]:
        return {"reason": self.reasons[self.kind][0], "message": str(self)[len(self.path) + 2 :], "field": self.path}


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> k8s.KubernetesError:
    """422 Invalid: `Federation.geofed.io "x" is invalid: spec.a: ...` (several in `[..., ...]`)."""
    texts = [str(e) for e in errors]
    body = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errors]}
    return status_error(422, "Invalid", f'{kind_qualified(kind, group)} "{name}" is invalid: {body}', details)


def forbidden(plural: str, group: str, name: str | None, why: str) -> k8s.KubernetesError:
    """403 Forbidden: `deployments.apps "x" is forbidden: <why>` (no name for lists and creates of unnamed)."""
    subject = qualified(plural, group) + (f' "{name}"' if name else "")
    details = {"name": name or "", "group": group, "kind": plural}
    return status_error(403, "Forbidden", f"{subject} is forbidden: {why}", details)


def not_found(plural: str, group: str, name: str) -> k8s.KubernetesError:
    details = {"name": name, "group": group, "kind": plural}
    return status_error(404, "NotFound", f'{qualified(plural, group)} "{name}" not found', details)


def already_exists(plural: str, group: str, name: str) -> k8s.KubernetesError:
    details = {"name": name, "group": group, "kind": plural}
    return status_error(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists', details)


def conflict(plural: str, group: str, name: str, why: str) -> k8s.KubernetesError:
    details = {"name": name, "group": group, "kind": plural}
    message = f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}'
    return status_error(409, "Conflict", message, details)


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> k8s.KubernetesError:
    return status_error(400, "BadRequest", message)
