"""How question/answer pairs are serialized, in one place.

The model sees ``<Q>question<A>answer`` pairs joined with ``<D>``. These structural markers are
special tokens that encoding user text must never produce: a post that literally contains the
text ``<Q>`` has to stay text. So corpus files (``train.txt``, ``val.txt``) store each marker as a
single ASCII control character that cannot occur in user text (XML 1.0 forbids it, and ``prepare``
strips C0 controls other than tab/newline/carriage return from plain-text sources). The readable
``<Q>`` notation is used only for display and for prompts, where a user means the marker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

QUESTION = "<Q>"
ANSWER = "<A>"
DOC = "<D>"
PAD = "<pad>"
UNK = "<unk>"

#: Markers that separate structure in a serialized corpus, and the control character that stands
#: for each in corpus files.
MARKER_CHARS: dict[str, str] = {QUESTION: "\x1e", ANSWER: "\x1f", DOC: "\x1d"}
CHAR_MARKERS: dict[str, str] = {c: m for m, c in MARKER_CHARS.items()}

_MARK_SPLIT = re.compile("([\x1d\x1e\x1f])")
_PROMPT_SPLIT = re.compile("(<Q>|<A>|<D>)")
# C0 controls (and DEL) other than \t \n \r: never legal in XML text, and reserved for markers.
_FORBIDDEN_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_text(text: str) -> str:
    """User text with the reserved control characters removed (they can never be markers)."""
    return _FORBIDDEN_CONTROLS.sub("", text)


def serialize_pair(question: str, answer: str) -> str:
    """One pair in corpus-file form: ``<Q>`` mark, question, ``<A>`` mark, answer."""
    return MARKER_CHARS[QUESTION] + clean_text(question) + MARKER_CHARS[ANSWER] + clean_text(answer)


def split_marked(marked: str) -> Iterator[tuple[bool, str]]:
    """Split corpus-file text into ``(is_marker, piece)``; a marker piece is its ``<Q>`` name."""
    for piece in _MARK_SPLIT.split(marked):
        if not piece:
            continue
        if piece in CHAR_MARKERS:
            yield True, CHAR_MARKERS[piece]
        else:
            yield False, piece


def prompt_to_marked(prompt: str) -> str:
    """A user's prompt, where ``<Q>``/``<A>``/``<D>`` mean the markers, in corpus-file form."""
    text = clean_text(prompt)
    return "".join(MARKER_CHARS.get(p, p) for p in _PROMPT_SPLIT.split(text))


def render(marked: str) -> str:
    """Corpus-file text for display: each marker shown as ``<Q>``, ``<A>`` or ``<D>``."""
    return "".join(piece for _, piece in split_marked(marked))
