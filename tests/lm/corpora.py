"""Small corpora for the lm tests: made in the test, or read from the real dumps in
``../shared/data``.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import re
from pathlib import Path

import pytest

from lm.serialization import MARKER_CHARS, serialize_pair, split_marked


def make_corpus(root: Path, train: list[tuple[str, str]], val: list[tuple[str, str]]) -> Path:
    """A corpus dir as `sweeps prepare` writes it (only what the tokenizers read)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, pairs in (("train.txt", train), ("val.txt", val)):
        text = DOC.join(serialize_pair(q, a) for q, a in pairs)
        (root / name).write_text(text, encoding="utf-8")
    write_manifest(root)
    return root


def write_manifest(root: Path) -> None:
    blob = (root / "train.txt").read_bytes() + (root / "val.txt").read_bytes()
    manifest = {"format": "test", "sha256": hashlib.sha256(blob).hexdigest()}
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def history_corpus(root: Path) -> Path:
    """The history dump as a corpus dir: every 20th pair in val."""
    pairs = history_pairs()
    val = [p for i, p in enumerate(pairs) if i % 20 == 0]
    train = [p for i, p in enumerate(pairs) if i % 20]
    return make_corpus(root, train, val)


def text_bytes(marked: str) -> int:
    """UTF-8 bytes of the user text in corpus-file text (markers excluded)."""
    return sum(len(p.encode()) for is_mark, p in split_marked(marked) if not is_mark)


DATA = Path(__file__).resolve().parents[2].parent / "shared/data/stackexchange"


DOC = MARKER_CHARS["<D>"]


@functools.cache
def history_pairs() -> tuple[tuple[str, str], ...]:
    """Question/answer pairs of the real history dump, parsed roughly (tags dropped)."""
    path = DATA / "history.Posts.xml"
    if not path.is_file():
        pytest.skip(f"real Stack Exchange dump not found at {path} (only on the project's CI)")
    raw = path.read_text(encoding="utf-8-sig")
    questions: dict[str, str] = {}
    answers: dict[str, list[str]] = {}
    for row in re.finditer(r"<row\s([^>]*)/>", raw):
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', row.group(1)))
        body = html.unescape(re.sub(r"<[^>]+>", "", html.unescape(attrs.get("Body", ""))))
        if attrs.get("PostTypeId") == "1":
            questions[attrs["Id"]] = html.unescape(attrs.get("Title", "")) + "\n" + body
        elif attrs.get("PostTypeId") == "2":
            answers.setdefault(attrs.get("ParentId", ""), []).append(body)
    return tuple((q, a) for qid, q in questions.items() for a in answers.get(qid, []))
