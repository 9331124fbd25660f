"""Field checks shared by the validated config dataclasses (``lm.config``, ``sweeps.spec``).

Each check reads one attribute of a dataclass in its ``__post_init__`` and raises a
``FieldError`` naming the field and the value (``d_ff must be >= 1, got d_ff=0``), so every
config type words the same mistake the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from lm.errors import FieldError, closest


def check_int(
    obj: object, name: str, minimum: int | None = None, maximum: int | None = None
) -> None:
    require_int(getattr(obj, name), name, minimum, maximum)


def require_int(
    value: object, name: str, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` itself (an item of a list field, say), checked as ``check_int`` checks fields."""
    # bool is an int subclass: ``d_ff = true`` in a TOML file is a mistake, not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise FieldError(name, f"must be an integer, got {name}={value!r}")
    if minimum is not None and value < minimum:
        raise FieldError(name, f"must be >= {minimum}, got {name}={value}")
    if maximum is not None and value > maximum:
        raise FieldError(name, f"must be <= {maximum}, got {name}={value}")
    return value


def check_number(
    obj: object,
    name: str,
    *,
    positive: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    below: float | None = None,
) -> None:
    value = getattr(obj, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise FieldError(name, f"must be a number, got {name}={value!r}")
    if isinstance(value, float) and math.isinf(value):  # no knob takes an infinite value
        raise FieldError(name, f"must be a finite number, got {name}={value!r}")
    if positive and value <= 0:
        raise FieldError(name, f"must be > 0, got {name}={value}")
    if minimum is not None and value < minimum:
        raise FieldError(name, f"must be >= {minimum}, got {name}={value}")
    if maximum is not None and value > maximum:
        raise FieldError(name, f"must be <= {maximum}, got {name}={value}")
    if below is not None and value >= below:
        raise FieldError(name, f"must be < {below}, got {name}={value}")
    # Store floats as floats so to_dict() -> JSON -> from_dict() is the identity.
    object.__setattr__(obj, name, float(value))


def check_choice(obj: object, name: str, choices: Iterable[str]) -> None:
    value = getattr(obj, name)
    choices = tuple(choices)
    if value not in choices:
        hint = closest(str(value), choices)
        raise FieldError(
            name,
            f"must be one of {', '.join(choices)}, got {name}={value!r}"
            + (f" (did you mean {hint!r}?)" if hint else ""),
        )


def check_bool(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, bool):
        raise FieldError(name, f"must be true or false, got {name}={value!r}")


def check_str(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, str) or not value.strip():
        raise FieldError(name, f"must be a non-empty string, got {name}={value!r}")
