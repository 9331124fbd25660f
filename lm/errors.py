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
