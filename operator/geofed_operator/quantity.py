"""Kubernetes resource quantities (`10Gi`, `500M`, `1.5e9`) as exact numbers, to compare PVC sizes."""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIX = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([numkMGTPE]i?|Ki)?)$")


def parse_quantity(value: int | float | str) -> Decimal:
    """The quantity's value in base units (bytes for storage); ValueError if it is not one."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match or (match.group(3) or "") not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = match.groups()
    if exponent:
        return Decimal(number + exponent)
    return Decimal(number) * _SUFFIX[suffix or ""]
