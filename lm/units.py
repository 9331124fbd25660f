"""Sizes in bytes as people write them: ``5MB``, ``512KiB``, ``8GiB``, ``1.5 GB``, ``1000``.

One parser for every place that takes a size (corpus sizes, memory budgets): KB/MB/GB/TB (and
k/m/g/t) are powers of 1000, KiB/MiB/GiB/TiB powers of 1024, case-insensitive.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)


def size_in_bytes(value: object) -> int | None:
    """A positive whole number of bytes from an int or a size string; None when it is neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else None
    if not isinstance(value, str):
        return None
    match = _SIZE.fullmatch(value)
    if not match:
        return None
    unit = (match.group(2) or "").lower()
    unit = unit if unit == "b" else unit.removesuffix("b")
    number = round(float(match.group(1)) * _UNITS[unit])
    return number if number > 0 else None
