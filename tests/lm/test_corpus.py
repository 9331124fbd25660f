"""Corpus preparation: real dumps, hostile XML, bad input, plain text, split, manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import lm.posts_xml
from lm.corpus import (
    REQUIRED_MANIFEST_KEYS,
    is_validation,
    load_manifest,
    parse_size,
    prepare_posts,
    prepare_text,
)
from lm.errors import SweepsError
from lm.posts_xml import html_to_text, stream_posts
from lm.serialization import MARKER_CHARS, render

DATA = Path(__file__).resolve().parents[2].parent / "shared/data/stackexchange"
Q, A, D = MARKER_CHARS["<Q>"], MARKER_CHARS["<A>"], MARKER_CHARS["<D>"]


def _dump(name: str) -> Path:
    path = DATA / f"{name}.Posts.xml"
    if not path.is_file():
        pytest.skip(f"real Stack Exchange dump {path} absent (it lives beside the checkout in CI)")
    return path


def _row(post_id: int, post_type: int, body: str = "", title: str = "", parent: int = 0) -> str:
    """A ``<row>``; ``body`` is HTML and gets XML-escaped as in a real dump."""
    attrs = f'Id="{post_id}" PostTypeId="{post_type}"'
    if parent:
        attrs += f' ParentId="{parent}"'
    esc = (
        body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
    attrs += f' Body="{esc.replace(chr(10), "&#xA;")}"'
    if title:
        attrs += f' Title="{title}"'
    return f"  <row {attrs} />\n"


def _write_posts(path: Path, rows: list[str], *, bom: bool = False, doctype: str = "") -> Path:
    text = '<?xml version="1.0" encoding="utf-8"?>\n' + doctype + "<posts>\n"
    text += "".join(rows) + "</posts>\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def _small_posts(path: Path, *, bom: bool = False, doctype: str = "") -> Path:
    rows = [
        _row(5, 2, "<p>answer five to three</p>", parent=3),  # before its question
        _row(1, 1, "<p>first body</p>", title="First question"),
        _row(2, 2, "<p>answer two</p>", parent=1),
        _row(3, 1, "<p>third body</p>", title="Third question"),
        _row(4, 2, "<p>answer four</p>", parent=3),
        _row(6, 1, "<p>nobody answers</p>", title="Unanswered"),
        _row(7, 4, "<p>tag wiki excerpt</p>"),
        _row(8, 5, "<p>tag wiki</p>"),
        _row(9, 7, "<p>privilege wiki</p>"),
        _row(10, 2, "<p>orphan answer</p>", parent=999),
        _row(11, 2, "<p>answer eleven</p>", parent=1),
    ]
    return _write_posts(path, rows, bom=bom, doctype=doctype)


def _pairs(corpus: Path) -> tuple[list[str], list[str]]:
    train = (corpus / "train.txt").read_text(encoding="utf-8")
    val = (corpus / "val.txt").read_text(encoding="utf-8")
    return train.split(D), val.split(D)


def _assert_refused(tmp_path: Path, exc: pytest.ExceptionInfo[SweepsError], *needles: str):
    message = str(exc.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))]
    assert leftovers == [], f"partial output left behind: {leftovers}"


# --------------------------------------------------------------------------------------------
# Real dumps


@pytest.mark.parametrize(
    ("name", "questions", "answered", "answers", "other"),
    [("matheducators", 397, 384, 1507, 78 + 78 + 1), ("history", 556, 492, 1095, 3 + 3)],
)
def test_real_dump_counts_and_split(
    tmp_path: Path, name: str, questions: int, answered: int, answers: int, other: int
) -> None:
    out = tmp_path / "out"
    m = prepare_posts(_dump(name), out)
    assert (m["questions"], m["questions_answered"], m["answers"]) == (questions, answered, answers)
    assert m["questions"] - m["questions_answered"] == {"matheducators": 13, "history": 64}[name]
    assert m["pairs"] == answers and m["orphan_answers"] == 0 and m["other_posts"] == other
    assert m["train_pairs"] + m["val_pairs"] == m["pairs"]
    assert m["train_questions"] + m["val_questions"] == answered
    assert 0.02 < m["val_questions"] / answered < 0.09  # ~5 % by hash

    train, val = _pairs(out)
    assert (len(train), len(val)) == (m["train_pairs"], m["val_pairs"])
    for pair in train + val:  # every pair is exactly <Q>question<A>answer
        assert pair.count(Q) == 1 and pair.count(A) == 1 and pair.startswith(Q), pair[:80]
    # Split by question: no question text on both sides.
    train_q = {p[1:].split(A)[0] for p in train}
    val_q = {p[1:].split(A)[0] for p in val}
    assert not train_q & val_q and len(train_q) + len(val_q) == answered

    raw = (out / "train.txt").read_bytes() + (out / "val.txt").read_bytes()
    assert m["sha256"] == hashlib.sha256(raw).hexdigest()
    assert m["bytes"] == len(raw) == m["train_bytes"] + m["val_bytes"]
    assert m["chars"] == len(raw.decode("utf-8"))
    assert load_manifest(out) == m
    assert set(REQUIRED_MANIFEST_KEYS) <= set(m)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "train.txt", "val.txt"]


def test_real_dump_bom_and_html_flattened(tmp_path: Path) -> None:
    source = _dump("matheducators")
    assert source.read_bytes()[:3] == b"\xef\xbb\xbf"  # the quirk under test is really there
    prepare_posts(source, tmp_path / "out")
    text = (tmp_path / "out/train.txt").read_text(encoding="utf-8")
    assert "\ufeff" not in text
    assert "<p>" not in text and "&lt;" not in text and "&amp;" not in text and "&#xA;" not in text
    assert "$" in text  # LaTeX kept as text


def test_prepare_is_deterministic(tmp_path: Path) -> None:
    source = _dump("history")
    first = prepare_posts(source, tmp_path / "a")
    second = prepare_posts(source, tmp_path / "b")
    assert first["sha256"] == second["sha256"]


# --------------------------------------------------------------------------------------------
# Small hand-written dumps


def test_pairs_order_types_and_exact_serialization(tmp_path: Path) -> None:
    m = prepare_posts(_small_posts(tmp_path / "Posts.xml", bom=True), tmp_path / "out")
    assert (m["questions"], m["questions_answered"], m["answers"], m["pairs"]) == (3, 2, 5, 4)
    assert (m["orphan_answers"], m["other_posts"]) == (1, 3)
    q1 = f"{Q}First question\nfirst body{A}"
    q3 = f"{Q}Third question\nthird body{A}"
    expected = {
        "1": [q1 + "answer two", q1 + "answer eleven"],
        "3": [q3 + "answer four", q3 + "answer five to three"],
    }
    train, val = _pairs(tmp_path / "out")
    # Two answered questions: one on each side, whatever the hash says; answers in id order.
    in_val = [k for k in ("1", "3") if is_validation(k, 0.05)]
    buckets = {k: int(hashlib.sha256(k.encode()).hexdigest(), 16) % 10_000 for k in ("1", "3")}
    if len(in_val) != 1:  # all on one side: the question nearest the threshold moves over
        in_val = [min(buckets, key=buckets.__getitem__)]
    (val_key,) = in_val
    assert val == expected[val_key]
    assert train == expected["3" if val_key == "1" else "1"]


def test_literal_markers_in_bodies_stay_text(tmp_path: Path) -> None:
    rows = [
        _row(
            1, 1, "<p>What does &lt;Q&gt; mean? &amp;#x1e; &lt;script&gt;</p>", title="a &lt;A&gt;"
        ),
        _row(2, 2, "<p>It is &lt;Q&gt; and &lt;D&gt;.</p>", parent=1),
        _row(3, 1, "<p>b</p>", title="b"),
        _row(4, 2, "<p>c</p>", parent=3),
    ]
    prepare_posts(_write_posts(tmp_path / "Posts.xml", rows), tmp_path / "out")
    train, val = _pairs(tmp_path / "out")
    pair = next(p for p in train + val if "mean?" in p)
    assert pair.count(Q) == 1 and pair.count(A) == 1 and D not in pair
    assert pair == f"{Q}a <A>\nWhat does <Q> mean? &#x1e; <script>{A}It is <Q> and <D>."
    assert render(pair) == "<Q>a <A>\nWhat does <Q> mean? &#x1e; <script><A>It is <Q> and <D>."


def test_small_chunks_and_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _small_posts(tmp_path / "Posts.xml", bom=True)
    calls: list[tuple[int, int]] = []
    reference = prepare_posts(source, tmp_path / "ref")
    monkeypatch.setattr(lm.posts_xml, "CHUNK_BYTES", 7)  # rows, BOM and entities split anywhere
    m = prepare_posts(source, tmp_path / "out", progress=lambda d, t: calls.append((d, t)))
    assert m["sha256"] == reference["sha256"]
    size = source.stat().st_size
    assert calls[-1] == (size, size) and len(calls) == -(-size // 7)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_external_dtd_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text('<!ENTITY leak "TOPSECRET-42">')
    doctype = f'<!DOCTYPE posts SYSTEM "{secret.as_uri()}">\n'  # as history.Posts.xml has one
    source = _small_posts(tmp_path / "Posts.xml", doctype=doctype)
    m = prepare_posts(source, tmp_path / "corpus")
    assert m["pairs"] == 4
    assert "TOPSECRET" not in (tmp_path / "corpus/train.txt").read_text()


def test_reprepare_replaces_corpus_and_keeps_caches_of_identical_text(tmp_path: Path) -> None:
    source = _small_posts(tmp_path / "Posts.xml")
    out = tmp_path / "out"
    prepare_posts(source, out)
    (out / "cache").mkdir()
    (out / "cache/meta.json").write_text("{}")
    with pytest.raises(SweepsError, match="already holds a corpus; pass --force"):
        prepare_posts(source, out)
    prepare_posts(source, out, replace=True)
    assert (out / "cache/meta.json").is_file()  # same text: token caches stay
    source.write_text(source.read_text().replace("answer two", "changed"))
    prepare_posts(source, out, replace=True)
    assert not (out / "cache").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --------------------------------------------------------------------------------------------
# Bad input: one line, no output left behind

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE posts [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<posts>
  <row Id="1" PostTypeId="1" Title="&lol9;" Body="x" />
  <row Id="2" PostTypeId="2" ParentId="1" Body="&lol9;" />
</posts>
"""


def test_billion_laughs_refused(tmp_path: Path) -> None:
    source = tmp_path / "Posts.xml"
    source.write_text(BILLION_LAUGHS)
    with pytest.raises(SweepsError) as exc:
        prepare_posts(source, tmp_path / "out")
    _assert_refused(tmp_path, exc, "entity", "lol")


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE posts [<!ENTITY s SYSTEM "{uri}">]>',  # general external entity
        '<!DOCTYPE posts [<!ENTITY % p SYSTEM "{uri}"> %p;]>',  # parameter entity
        '<!DOCTYPE posts [<!ENTITY s SYSTEM "http://127.0.0.1:9/x">]>',  # network
    ],
)
def test_xxe_refused_and_secret_never_read(tmp_path: Path, doctype: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-42")
    rows = [
        _row(1, 1, "x", title="t"),
        '  <row Id="2" PostTypeId="2" ParentId="1" Body="y">&s;</row>\n',
    ]
    source = _write_posts(
        tmp_path / "Posts.xml", rows, doctype=doctype.format(uri=secret.as_uri()) + "\n"
    )
    with pytest.raises(SweepsError) as exc:
        prepare_posts(source, tmp_path / "out")
    _assert_refused(tmp_path, exc, "entit")
    assert "TOPSECRET" not in str(exc.value)


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    full = _small_posts(tmp / "full.xml").read_bytes()
    (tmp / "truncated.xml").write_bytes(full[: len(full) * 2 // 3])
    (tmp / "notxml.xml").write_bytes(b"\x37\x7a\xbc\xaf\x27\x1c binary 7z archive")
    (tmp / "text.xml").write_text("just some words\n")
    (tmp / "empty.xml").write_bytes(b"")
    (tmp / "comments.xml").write_text('<comments><row Id="1" /></comments>')
    (tmp / "junk.xml").write_bytes(full.replace(b"<posts>", b"<posts><a></b>", 1))
    (tmp / "adir").mkdir()
    _write_posts(tmp / "nopairs.xml", [_row(1, 1, "q", title="t"), _row(2, 4, "w")])
    _write_posts(tmp / "onepair.xml", [_row(1, 1, "q", title="t"), _row(2, 2, "a", parent=1)])
    return {
        "truncated": (tmp / "truncated.xml", ("truncated at line",)),
        "not xml": (tmp / "notxml.xml", ("not an XML file",)),
        "text": (tmp / "text.xml", ("not an XML file",)),
        "empty": (tmp / "empty.xml", ("empty",)),
        "wrong root": (tmp / "comments.xml", ("<comments>", "expected <posts>", "Posts.xml")),
        "malformed": (tmp / "junk.xml", ("malformed XML at line 2",)),
        "directory": (tmp / "adir", ("is a directory",)),
        "missing": (tmp / "nope.xml", ("no such file",)),
        "no pairs": (tmp / "nopairs.xml", ("no question/answer pairs",)),
        "too small": (tmp / "onepair.xml", ("too small",)),
    }


@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "not xml",
        "text",
        "empty",
        "wrong root",
        "malformed",
        "directory",
        "missing",
        "no pairs",
        "too small",
    ],
)
def test_bad_posts_input(tmp_path: Path, case: str) -> None:
    source, needles = _bad_inputs(tmp_path)[case]
    with pytest.raises(SweepsError) as exc:
        prepare_posts(source, tmp_path / "out" / "nested")  # parents we made go too
    _assert_refused(tmp_path, exc, str(source), *needles)


def test_out_must_not_be_a_foreign_dir_or_a_file(tmp_path: Path) -> None:
    source = _small_posts(tmp_path / "Posts.xml")
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious/notes.md").write_text("mine")
    with pytest.raises(SweepsError, match="not a corpus dir"):
        prepare_posts(source, tmp_path / "precious", replace=True)  # never deletes user files
    assert (tmp_path / "precious/notes.md").read_text() == "mine"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SweepsError, match="is a file"):
        prepare_posts(source, tmp_path / "afile")
    with pytest.raises(SweepsError, match="inside --out"):
        prepare_posts(source, tmp_path)
    (tmp_path / "empty").mkdir()
    assert prepare_posts(source, tmp_path / "empty")["pairs"] == 4  # an empty dir is fine


@pytest.mark.parametrize("fraction", [0, 1, -0.1, 1.5, True, "0.1"])
def test_bad_val_fraction(tmp_path: Path, fraction: object) -> None:
    source = _small_posts(tmp_path / "Posts.xml")
    with pytest.raises(SweepsError, match="val_fraction"):
        prepare_posts(source, tmp_path / "out", val_fraction=fraction)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# HTML -> text


def test_html_to_text() -> None:
    html = (
        "<p>Use &lt;Q&gt; &amp; &quot;x&quot; &#39;y&#39; &eacute;</p>\n\n"
        "<pre><code>def f(x):\n    return x &lt; 1\n</code></pre>\n\n"
        "<p>Second <em>para</em><br>line   two\nwrapped</p>"
        "<ul><li>one</li><li>two</li></ul><h2>Head</h2>"
        "<blockquote><p>quoted <a href='http://x'>link</a></p></blockquote>"
        "<p>a <script>evil()</script> b</p>"
    )
    assert html_to_text(html) == (
        "Use <Q> & \"x\" 'y' é\n"
        "def f(x):\n    return x < 1\n"
        "Second para\nline two wrapped\none\ntwo\nHead\nquoted link\na b"
    )
    assert html_to_text("<pre><code>  indented\n\n  after blank\n</code></pre>") == (
        "  indented\n\n  after blank"
    )
    assert html_to_text("") == "" and html_to_text("no  tags") == "no tags"


def test_stream_posts_yields_rows_in_file_order(tmp_path: Path) -> None:
    rows: list[lm.posts_xml.Row] = []
    stream_posts(_small_posts(tmp_path / "Posts.xml"), rows.append)
    assert [r.post_id for r in rows] == [5, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert rows[0].parent_id == 3 and rows[1].title == "First question"
    assert rows[1].body == "<p>first body</p>"


# --------------------------------------------------------------------------------------------
# Plain text


def test_prepare_text_globs_documents_and_cleaning(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    for i in range(30):
        (notes / f"n{i:02d}.txt").write_text(f"note {i}\nline two\n")
    (notes / "sub/deep.txt").write_bytes(b"\xef\xbb\xbfbom\r\nwin\x1e\x1dctrl <Q> kept")
    (notes / "empty.txt").write_text("")
    (notes / "blank.txt").write_text("  \n\n")
    m = prepare_text([str(notes / "*.txt"), str(notes / "sub" / "deep.txt")], tmp_path / "out")
    assert prepare_text(str(notes / "**" / "*.txt"), tmp_path / "again")["sha256"] == m["sha256"]
    assert m["format"] == "text" and m["pairs"] == m["questions"] == m["answers"] == 0
    assert m["documents"] == 31 and m["files_skipped_empty"] == 2
    assert m["train_documents"] + m["val_documents"] == 31 and m["val_documents"] >= 1
    train, val = _pairs(tmp_path / "out")
    docs = sorted(train + val)
    assert len(docs) == 31 and "note 7\nline two\n" in docs
    assert "bom\nwinctrl <Q> kept" in docs  # BOM dropped, CRLF -> LF, control chars removed
    assert Q not in "".join(docs)
    assert load_manifest(tmp_path / "out")["sha256"] == m["sha256"]


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: [str(d / "*.md")], "matches no file"),
        (lambda d: [str(d / "missing.txt")], "no such file"),
        (lambda d: [str(d)], "is a directory"),
        (lambda d: [str(d / "a.txt")], "too small"),
        (lambda d: [str(d / "latin1.txt"), str(d / "a.txt")], "not UTF-8"),
        (lambda d: [], "no text sources"),
    ],
)
def test_bad_text_input(tmp_path: Path, make, needle: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello")
    (src / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(SweepsError) as exc:
        prepare_text(make(src), tmp_path / "out")
    _assert_refused(tmp_path, exc, needle)


# --------------------------------------------------------------------------------------------
# Helpers


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1000", 1000),
        ("5MB", 5_000_000),
        ("60MB", 60_000_000),
        ("512KiB", 524_288),
        ("1.5 mb", 1_500_000),
        ("2GiB", 2 * 2**30),
        ("7b", 7),
        ("3k", 3000),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "abc", "5 parsecs", "-1MB", "0", "1e6", "MB"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(SweepsError, match="size"):
        parse_size(text)


def test_load_manifest_errors(tmp_path: Path) -> None:
    with pytest.raises(SweepsError, match="does not exist"):
        load_manifest(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(SweepsError, match="not a directory"):
        load_manifest(tmp_path / "file")
    corpus = tmp_path / "c"
    corpus.mkdir()
    with pytest.raises(SweepsError, match=r"no manifest\.json"):
        load_manifest(corpus)
    (corpus / "manifest.json").write_text("{not json")
    with pytest.raises(SweepsError, match="unreadable manifest"):
        load_manifest(corpus)
    (corpus / "manifest.json").write_text(json.dumps({"source": "x"}))
    with pytest.raises(SweepsError, match="lacks format"):
        load_manifest(corpus)
    (corpus / "manifest.json").write_text(json.dumps(dict.fromkeys(REQUIRED_MANIFEST_KEYS, 0)))
    with pytest.raises(SweepsError, match=r"train\.txt is missing"):
        load_manifest(corpus)


def test_split_hash_rule() -> None:
    # The documented rule, so other tools can reproduce the split.
    for key in map(str, range(200)):
        bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10_000
        assert is_validation(key, 0.05) == (bucket < 500)
    share = sum(is_validation(str(i), 0.05) for i in range(20_000)) / 20_000
    assert 0.04 < share < 0.06
