"""Property-based tests (Hypothesis) of the Posts.xml reader: any bytes, and any XML-ish text
built from the pieces a dump (or an attack on one) is made of, end in rows or a one-line
``SweepsError``, never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lm.errors import SweepsError
from lm.posts_xml import stream_posts

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PIECES = [
    '<?xml version="1.0" encoding="utf-8"?>',
    "<posts>",
    "</posts>",
    "<row ",
    "/>",
    ">",
    "</row>",
    'Id="1" ',
    'Id="x" ',
    'PostTypeId="1" ',
    'PostTypeId="2" ',
    'ParentId="1" ',
    'Body="&lt;p&gt;Hi &amp; bye&lt;/p&gt;" ',
    'Title="T" ',
    'Body="<b>" ',
    "&amp;",
    "&lt;",
    "&#0;",
    "&#xD800;",
    "&bogus;",
    "<!DOCTYPE posts [<!ENTITY a 'aaaa'>]>",
    "&a;",
    '<!ENTITY % p SYSTEM "file:///etc/passwd">',
    "<![CDATA[x]]>",
    "<!-- c -->",
    "\x00",
    "\ufeff",
    "\u00e9",
    "\U0001f600",
    "\r\n",
    " ",
    '<posts><row Id="2" PostTypeId="1" Body="q"/>',
]

xmlish = st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=30).map("".join)


def read_all(data: bytes) -> list:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "Posts.xml"
        path.write_bytes(data)
        rows: list = []
        try:
            stream_posts(path, rows.append)
        except SweepsError as exc:
            text = str(exc)
            assert text and "\n" not in text, repr(text)
        return rows


@SETTINGS
@given(st.binary(max_size=600))
def test_any_bytes(data: bytes) -> None:
    read_all(data)


@SETTINGS
@given(xmlish, st.sampled_from(["utf-8", "utf-16", "latin-1"]))
def test_any_xmlish_text(text: str, encoding: str) -> None:
    read_all(text.encode(encoding, errors="replace"))
