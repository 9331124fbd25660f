"""Values out of a pandas frame as JSON would hold them: the one conversion at the boundary
where values leave pandas (results' rows, replicate labels, effects, the charts' colours)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd


def plain_value(value: Any) -> Any:
    """A value out of a frame as JSON would hold it: numpy scalars unwrapped (so
    ``isinstance(v, int)`` holds for an integer column's values), NaN and NA as None, and an
    integral float as the integer it stands for (256.0 from a float column is the enqueued 256).
    The one conversion at the boundary where values leave pandas."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
    return value


def plain_values(values: Iterable[Any]) -> list[Any]:
    """``plain_value`` of each (a list: a Series would turn them back into numpy scalars)."""
    return [plain_value(v) for v in values]
