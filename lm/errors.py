"""The project's one root exception.

Everything a user can get wrong (a path, a value, a file) raises ``SweepsError`` with a one-line
message naming what is wrong and how to fix it; the CLI prints that line and exits with
``exit_code`` (2, a usage error) without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SweepsError(Exception):
    """A user-facing error: one line, what is wrong and how to fix it."""

    exit_code = 2


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name a typo most likely meant (for "did you mean ...?"), or None."""
    matches = difflib.get_close_matches(name, sorted(known), n=1)
    return matches[0] if matches else None


class FieldError(SweepsError):
    """A ``SweepsError`` about one field: ``d_ff must be >= 1, got d_ff=0``.

    ``field`` and ``problem`` are kept apart so a reader of nested data (a study spec) can put the
    whole key in front (``spec.toml: limits.max_retries: must be >= 0, got max_retries=-1``).
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem
