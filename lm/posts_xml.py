"""Stream a Stack Exchange ``Posts.xml`` with expat, refusing hostile XML, and flatten body HTML.

Why expat directly (and not ``ElementTree``/``iterparse``): it is fed fixed-size chunks, so a full
dump never sits in memory, and it exposes the hooks needed to refuse entity declarations and
external entities outright without any extra dependency. A Stack Exchange dump never declares an
entity, so refusing every declaration costs nothing and shuts out both "billion laughs" (entity
expansion) and XXE (an entity whose replacement text is read from a file or URL).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from xml.parsers import expat

from lm.errors import SweepsError

CHUNK_BYTES = 1 << 20

#: Roots of the other files of a Stack Exchange dump, to say which file the user passed instead.
_OTHER_DUMP_FILES = {
    "comments": "Comments.xml",
    "users": "Users.xml",
    "votes": "Votes.xml",
    "badges": "Badges.xml",
    "tags": "Tags.xml",
    "posthistory": "PostHistory.xml",
    "postlinks": "PostLinks.xml",
}

_NO_ELEMENTS = expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS]
# Expat errors that mean "the input stopped early" rather than "the input is wrong".
_TRUNCATION_ERRORS = {
    _NO_ELEMENTS,
    expat.errors.codes[expat.errors.XML_ERROR_UNCLOSED_TOKEN],
    expat.errors.codes[expat.errors.XML_ERROR_PARTIAL_CHAR],
}

# --------------------------------------------------------------------------------------------
# Body HTML -> text

# Tags that start a new line of text: paragraphs, list items, code blocks, headings, quotes.
_BLOCK_TAGS = frozenset(
    {
        *("p", "br", "li", "pre", "blockquote", "div", "hr"),
        *("h1", "h2", "h3", "h4", "h5", "h6"),
        *("ul", "ol", "dl", "dt", "dd", "table", "tr"),
    }
)
# Tags whose content is not text a reader sees.
_SKIP_TAGS = frozenset(("script", "style"))
_SPACES = re.compile(r"\s+")
_BREAK = None  # a block boundary in the piece list; runs of them make one newline


class _HtmlToText(HTMLParser):
    """Tags dropped, entities unescaped, block boundaries turned into newlines, code kept.

    Outside ``<pre>`` whitespace is collapsed as a browser would (so such text never holds a
    newline); inside it is kept verbatim, so code keeps its lines and indentation.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)  # entities (&lt; &amp; &#39; ...) unescaped
        self._pieces: list[tuple[str, bool] | None] = []
        self._pre = 0
        self._skip = 0

    def convert(self, html: str) -> str:
        self.reset()
        self._pieces, self._pre, self._skip = [], 0, 0
        self.feed(html)
        self.close()
        return _join(self._pieces)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self._pieces.append(_BREAK)
        if tag == "pre":
            self._pre += 1
        elif tag in _SKIP_TAGS:
            self._skip += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:  # <br/>, <hr/>: one boundary, no nesting
            self._pieces.append(_BREAK)

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        elif tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        if tag in _BLOCK_TAGS:
            self._pieces.append(_BREAK)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._pre:
            self._pieces.append((data, True))
        else:
            text = _SPACES.sub(" ", data)
            last = self._pieces[-1] if self._pieces else None
            if text[:1] == " " and last is not None and not last[1] and last[0][-1:] == " ":
                text = text[1:]  # one space between words, even across dropped tags
            if text:
                self._pieces.append((text, False))


def _join(pieces: list[tuple[str, bool] | None]) -> str:
    """One line per block: edge spaces of flowing text and edge newlines of code dropped."""
    lines: list[str] = []
    current: list[tuple[str, bool]] = []

    def flush() -> None:
        text = "".join(t for t, _ in current).strip("\n")
        if not current[0][1]:
            text = text.lstrip(" ")
        if not current[-1][1]:
            text = text.rstrip(" ")
        if text.strip():
            lines.append(text)
        current.clear()

    for piece in pieces:
        if piece is _BREAK:
            if current:
                flush()
        else:
            current.append(piece)
    if current:
        flush()
    return "\n".join(lines)


_converter = _HtmlToText()


def html_to_text(html: str) -> str:
    """The readable text of a post body: tags dropped, entities unescaped, one line per block."""
    if "<" not in html and "&" not in html:
        return _SPACES.sub(" ", html).strip()
    return _converter.convert(html)


# --------------------------------------------------------------------------------------------
# Posts.xml streaming


@dataclass(frozen=True)
class Row:
    """The fields of one ``<row>`` that a corpus needs (``parent_id`` only for answers)."""

    post_id: int
    post_type: int
    parent_id: int | None
    title: str
    body: str


def _int_attr(attrs: dict[str, str], name: str) -> int | None:
    value = attrs.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def stream_posts(
    path: Path,
    on_row: Callable[[Row], None],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Call ``on_row`` for every ``<row>`` under the ``<posts>`` root of ``path``, in file order.

    Reads ``CHUNK_BYTES`` at a time; holds no more than one chunk and one row. Raises
    ``SweepsError`` (one line, naming ``path``) for anything that is not a well-formed, entity-free
    Stack Exchange ``Posts.xml``.
    """
    name = str(path)
    parser = expat.ParserCreate()
    # Never read an external DTD or parameter entity: nothing outside the file is ever opened.
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    depth = 0
    seen_root = False  # decides "not XML at all" versus "broken Posts.xml"

    def refuse_entity(entity_name: str, *_: object) -> None:
        raise SweepsError(
            f"{name} line {parser.CurrentLineNumber}: the XML declares the entity "
            f"{entity_name!r}; entity declarations are refused (entity expansion and external "
            "entities are attack vectors and never occur in a Stack Exchange dump): pass an "
            "unmodified Posts.xml"
        )

    def refuse_external(
        context: str | None, base: str | None, system_id: str | None, public_id: str | None
    ) -> int:
        raise SweepsError(
            f"{name} line {parser.CurrentLineNumber}: the XML references an external entity "
            f"({system_id!r}); external entities are never read: pass an unmodified Posts.xml"
        )

    def refuse_skipped(entity_name: str, is_parameter: bool) -> None:
        raise SweepsError(
            f"{name} line {parser.CurrentLineNumber}: the XML uses the undefined entity "
            f"'&{entity_name};'; pass an unmodified Posts.xml"
        )

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal depth, seen_root
        depth += 1
        seen_root = True
        if depth == 1:
            if tag != "posts":
                other = _OTHER_DUMP_FILES.get(tag.lower())
                hint = f" (this looks like {other})" if other else ""
                raise SweepsError(
                    f"{name}: the root element is <{tag}>, expected <posts>{hint}; "
                    "pass a Stack Exchange Posts.xml"
                )
            return
        if depth != 2 or tag != "row":
            return
        post_id = _int_attr(attrs, "Id")
        post_type = _int_attr(attrs, "PostTypeId")
        if post_id is None or post_type is None:
            raise SweepsError(
                f"{name} line {parser.CurrentLineNumber}: a <row> without a numeric Id and "
                "PostTypeId; pass a Stack Exchange Posts.xml"
            )
        on_row(
            Row(
                post_id=post_id,
                post_type=post_type,
                parent_id=_int_attr(attrs, "ParentId"),
                title=attrs.get("Title", ""),
                body=attrs.get("Body", ""),
            )
        )

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1

    parser.EntityDeclHandler = refuse_entity
    parser.UnparsedEntityDeclHandler = refuse_entity
    parser.ExternalEntityRefHandler = refuse_external
    parser.SkippedEntityHandler = refuse_skipped
    parser.StartElementHandler = start
    parser.EndElementHandler = end

    total = path.stat().st_size
    done = 0
    try:
        with path.open("rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                parser.Parse(chunk, False)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
            parser.Parse(b"", True)
    except expat.ExpatError as e:
        raise _parse_error(name, e, seen_root=seen_root, at_end=done == total) from None
    except OSError as e:
        raise SweepsError(
            f"{name}: cannot read the file ({e.strerror}); check its permissions"
        ) from None


def _parse_error(name: str, e: expat.ExpatError, *, seen_root: bool, at_end: bool) -> SweepsError:
    message = expat.errors.messages[e.code]
    if not seen_root and e.lineno <= 1 and e.code == _NO_ELEMENTS:
        return SweepsError(f"{name}: the file is empty; pass a Stack Exchange Posts.xml")
    if not seen_root:
        return SweepsError(
            f"{name}: not an XML file ({message} at line {e.lineno}); pass a Stack Exchange "
            "Posts.xml (extract the site's .7z archive first)"
        )
    if at_end and e.code in _TRUNCATION_ERRORS:
        return SweepsError(
            f"{name}: the XML is truncated at line {e.lineno} ({message}); the file is "
            "incomplete: download or extract it again"
        )
    return SweepsError(
        f"{name}: malformed XML at line {e.lineno}, column {e.offset} ({message}); "
        "pass an unmodified Stack Exchange Posts.xml"
    )
