"""The two rules for text that comes from outside the program (what a model generates, a corpus
holds, a child writes, another user stores in a shared database): how it is stored, and how it
is shown.

Stored (``storable``): every code point as is, except the ones some backend refuses, which
become U+FFFD (the replacement character, the same mark a tokenizer's decode already leaves
for bytes that are not text):

- U+0000 (NUL): PostgreSQL text cannot hold it ("text fields cannot contain NUL (0x00)
  bytes"); an untrained byte-level model samples it (the byte 0x00 is one of its ids);
- U+D800..U+DFFF (lone surrogates, e.g. from a ``"\\udc80"`` escape in a child's JSON): not
  UTF-8 at all, so neither SQLite nor PostgreSQL (nor psycopg's encoder) accepts them.

The rule is applied the same way to every table and attribute (samples, evaluations' JSON,
trial attributes such as reasons and notes), so a text reads the same on SQLite and PostgreSQL.

Shown (``escape_controls``): on a terminal and in the report, each other control character
(C0, DEL, C1) and each bidirectional control (U+202E ...) appears escaped as visible text (ESC as
``\\x1b``, U+202E as ``\\u202e``), so stored text can neither drive a terminal nor reorder or
hide in a page; newlines and tabs may be kept as layout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: What a code point a backend refuses is stored as.
REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

_CONTROLS = (*range(0x20), 0x7F, *range(0x80, 0xA0))  # Unicode category Cc
#: Bidirectional controls (marks, embeddings, overrides, isolates): U+202E (right-to-left
#: override) in a study name or a reason reverses what a terminal shows after it.
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_ESCAPE_ALL = {c: _NAMED.get(c, f"\\x{c:02x}") for c in _CONTROLS} | {
    c: f"\\u{c:04x}" for c in _BIDI
}
_ESCAPE_BUT_LAYOUT = {c: e for c, e in _ESCAPE_ALL.items() if c not in (0x09, 0x0A)}


def storable(text: str) -> str:
    """``text`` as every backend stores it: NUL and lone surrogates replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable_value(value: Any) -> Any:
    """A JSON-like value with ``storable`` applied to every string in it, keys included."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return {storable_value(k): storable_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_value(v) for v in value]
    return value


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with each control character written as visible text: ESC as ``\\x1b``, a
    newline as ``\\n`` (kept, with tabs, when ``keep_newlines``); plain spaces and every
    printable character unchanged."""
    return text.translate(_ESCAPE_BUT_LAYOUT if keep_newlines else _ESCAPE_ALL)


#: The most characters an error line shows: a message may quote what it refuses (a 1 MB
#: ``when`` literal, a 5 MB choice, a 100 KB study name) and once echoed such lines whole.
MAX_LINE_CHARS = 2000
_TAIL_CHARS = 500  # the end of a message says how to fix it: always kept


def elide(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and its last
    ``_TAIL_CHARS`` with how many were left out between them."""
    if len(text) <= limit:
        return text
    head = limit - _TAIL_CHARS - 40
    return (
        f"{text[:head]} ...[{len(text) - head - _TAIL_CHARS:,} characters]... {text[-_TAIL_CHARS:]}"
    )
