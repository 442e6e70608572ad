"""Resource quantities as apimachinery's `resource.Quantity` holds them: an exact value and its format.

The format (DecimalSI `2k`/`500m`, BinarySI `2Gi`, DecimalExponent `1e3`) decides how the value prints:
`str()` is `Quantity.String()`'s canonical form (`1000m` -> `1`, `2048Mi` -> `2Gi`, `1.5` -> `1500m`,
a BinarySI value below 1024 or with a fraction prints as DecimalSI), as API messages show them.
A sum keeps the format of its left operand, as `Quantity.Add` does.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from geofed_operator.quantity import parse_quantity

BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


@dataclasses.dataclass(frozen=True)
class Quantity:
    value: Decimal
    format: str = "DecimalSI"  # or BinarySI, DecimalExponent

    @classmethod
    def parse(cls, raw: Any) -> Quantity:
        """A quantity from its JSON form (`"500m"`, `"2Gi"`, `2`); ValueError if it is not one."""
        text = str(raw).strip()
        value = parse_quantity(raw if isinstance(raw, int | float) else text)
        if text.endswith(tuple(BINARY)):
            return cls(value, "BinarySI")
        if "e" in text.lower():
            return cls(value, "DecimalExponent")
        return cls(value, "DecimalSI")

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __str__(self) -> str:
        value = self.value
        if self.format == "BinarySI" and abs(value) >= 1024 and value == value.to_integral_value():
            for suffix, power in sorted(BINARY.items(), key=lambda kv: -kv[1]):
                if value % (1024**power) == 0:
                    return f"{int(value / 1024**power)}{suffix}"
            return str(int(value))
        if value == 0:
            return "0"
        for exponent in sorted(DECIMAL, reverse=True):
            mantissa = value / Decimal(10) ** exponent
            if mantissa == mantissa.to_integral_value():
                if self.format == "DecimalExponent":
                    return f"{int(mantissa)}e{exponent}" if exponent else str(int(mantissa))
                return f"{int(mantissa)}{DECIMAL[exponent]}"
        return str(value)  # finer than nano, which the API server rounds up to


def parse_list(resources: dict[str, Any] | None) -> dict[str, Quantity]:
    """A ResourceList (`{"cpu": "500m", ...}`) parsed; entries that are no quantity are left out."""
    out = {}
    for name, raw in (resources or {}).items():
        try:
            out[name] = Quantity.parse(raw)
        except (ValueError, ArithmeticError):
            continue
    return out
