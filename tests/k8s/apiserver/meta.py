"""Object metadata as the API server validates it: names, label keys and values, annotation size."""

from __future__ import annotations

import re
from typing import Any

from .errors import FieldError

DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
ANNOTATIONS_MAX = 256 * 1024

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    f"start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{DNS1123_SUBDOMAIN}')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    f"end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{DNS1123_LABEL}')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    f"character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    f"regex used for validation is '{DNS1035_LABEL}')"
)
VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    f"and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    f"regex used for validation is '{LABEL_VALUE}')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    f"alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
    f"regex used for validation is '{QUALIFIED_NAME}')"
)


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def name_problems(name: str, name_format: str) -> list[str]:
    """What is wrong with `name` for a resource whose names are `subdomain`, `label`, `1035` or `path`."""
    if name_format == "path":  # RBAC objects: any name that is a valid path segment
        bad = name in (".", "..") or "/" in name or "%" in name
        return (
            ["may not contain '/'" if "/" in name else "may not contain '%'" if "%" in name else f"may not be '{name}'"]
            if bad
            else []
        )
    limit, pattern, message = {
        "subdomain": (253, DNS1123_SUBDOMAIN, SUBDOMAIN_MSG),
        "label": (63, DNS1123_LABEL, LABEL_MSG),
        "1035": (63, DNS1035_LABEL, DNS1035_MSG),
    }[name_format]
    problems = [f"must be no more than {limit} characters"] if len(name) > limit else []
    return problems + ([] if _full(pattern, name) else [message])


def label_key_problems(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in key and not prefix:
        problems.append("prefix part must be non-empty")
    elif prefix:
        if len(prefix) > 253:
            problems.append("prefix part must be no more than 253 characters")
        if not _full(DNS1123_SUBDOMAIN, prefix):
            problems.append("prefix part " + SUBDOMAIN_MSG)
    if not name:
        problems.append("name part must be non-empty")
    else:
        if len(name) > 63:
            problems.append("name part must be no more than 63 characters")
        if not _full(QUALIFIED_NAME, name):
            problems.append(NAME_PART_MSG)
    return problems


def label_value_problems(value: str) -> list[str]:
    problems = ["must be no more than 63 characters"] if len(value) > 63 else []
    return problems + ([] if _full(LABEL_VALUE, value) else [VALUE_MSG])


def validate(meta: dict[str, Any], name_format: str, *, check_name: bool = True) -> list[FieldError]:
    """Field errors for an object's metadata, as ValidateObjectMeta reports them."""
    errors: list[FieldError] = []
    name = meta.get("name")
    if check_name:
        if not name:
            errors.append(FieldError("metadata.name", "Required", "name or generateName is required"))
        else:
            errors += [FieldError("metadata.name", "Invalid", p, name) for p in name_problems(str(name), name_format)]
    for key, value in (meta.get("labels") or {}).items():
        errors += [FieldError("metadata.labels", "Invalid", p, key) for p in label_key_problems(key)]
        errors += [FieldError("metadata.labels", "Invalid", p, value) for p in label_value_problems(str(value))]
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errors += [FieldError("metadata.annotations", "Invalid", p, key) for p in label_key_problems(key.lower())]
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX:
        errors.append(FieldError("metadata.annotations", "TooLong", f"must have at most {ANNOTATIONS_MAX} bytes"))
    return errors
