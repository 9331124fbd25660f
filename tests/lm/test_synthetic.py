"""The synthetic Posts.xml: seeded, sized, a real dump for the parser, and learnable."""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from lm.corpus import load_manifest, prepare_synthetic
from lm.errors import SweepsError
from lm.posts_xml import Row, html_to_text, stream_posts
from lm.serialization import MARKER_CHARS
from lm.synthetic import write_synthetic_posts

SIZE = 1_000_000
ENTITY = re.compile(r"as with ([A-Z][a-z]+ [A-Z][a-z]+)")
WORD = re.compile(r"[A-Za-z]+")


@pytest.fixture(scope="module")
def posts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("synthetic") / "Posts.xml"
    write_synthetic_posts(path, size_bytes=SIZE, seed=0)
    return path


@pytest.fixture(scope="module")
def threads(posts: Path) -> list[tuple[str, str, list[str]]]:
    """(title, question text, answer texts) per answered question, in file order."""
    rows: list[Row] = []
    stream_posts(posts, rows.append)
    questions = {r.post_id: (r.title, html_to_text(r.body)) for r in rows if r.post_type == 1}
    answers: dict[int, list[str]] = {}
    for r in rows:
        if r.post_type == 2:
            answers.setdefault(r.parent_id or 0, []).append(html_to_text(r.body))
    return [(*questions[q], a) for q, a in answers.items()]


def test_deterministic_by_seed(tmp_path: Path, posts: Path) -> None:
    again, other = tmp_path / "again.xml", tmp_path / "other.xml"
    write_synthetic_posts(again, size_bytes=SIZE, seed=0)
    write_synthetic_posts(other, size_bytes=SIZE, seed=1)
    digest = hashlib.sha256(posts.read_bytes()).hexdigest()
    assert hashlib.sha256(again.read_bytes()).hexdigest() == digest
    assert hashlib.sha256(other.read_bytes()).hexdigest() != digest


@pytest.mark.parametrize("size", [50_000, 300_000, SIZE])
def test_size_within_ten_percent(tmp_path: Path, size: int) -> None:
    path = tmp_path / "Posts.xml"
    write_synthetic_posts(path, size_bytes=size, seed=3)
    assert abs(path.stat().st_size - size) <= 0.1 * size


def test_real_posts_xml_with_quirks(posts: Path) -> None:
    rows: list[Row] = []
    stream_posts(posts, rows.append)
    types = Counter(r.post_type for r in rows)
    assert types[1] > 100 and types[2] > types[1] and types[4] + types[5] > 0
    ids = {r.post_id for r in rows if r.post_type == 1}
    answered = {r.parent_id for r in rows if r.post_type == 2}
    assert answered <= ids and len(ids - answered) > 0  # some questions stay unanswered
    text = posts.read_text(encoding="utf-8")
    assert "&amp;lt;Q&amp;gt;" in text and "&amp;lt;script&amp;gt;" in text  # literal text
    assert "&lt;pre&gt;&lt;code&gt;" in text and "&lt;li&gt;" in text
    assert all(r.title for r in rows if r.post_type == 1)


def test_answers_carry_their_question_entity(threads: list[tuple[str, str, list[str]]]) -> None:
    entities = [ENTITY.search(question).group(1) for _, question, _ in threads]  # type: ignore[union-attr]
    assert len(set(entities)) > 0.5 * len(entities)  # many names, long tailed
    answers = [(e, a) for e, (_, _, texts) in zip(entities, threads, strict=True) for a in texts]
    own = sum(e in a for e, a in answers) / len(answers)
    rng = random.Random(0)
    shuffled = [e for e, _ in answers]
    rng.shuffle(shuffled)
    other = sum(e in a for e, (_, a) in zip(shuffled, answers, strict=True)) / len(answers)
    assert own > 0.8 and other < 0.1, (own, other)


def test_answers_share_topic_words_with_their_question(
    threads: list[tuple[str, str, list[str]]],
) -> None:
    def words(text: str) -> set[str]:
        return {w for w in WORD.findall(text.lower()) if len(w) > 5}

    def overlap(a: set[str], b: set[str]) -> float:
        return len(a & b) / max(1, len(a | b))

    questions = [words(t + " " + q) for t, q, _ in threads]
    answers = [[words(a) for a in texts] for _, _, texts in threads]
    shift = len(threads) // 2  # another thread: answers compared with an unrelated question

    def mean_overlap(offset: int) -> float:
        scores = [
            overlap(questions[i], a)
            for i in range(len(threads))
            for a in answers[(i + offset) % len(threads)]
        ]
        return sum(scores) / len(scores)

    own, other = mean_overlap(0), mean_overlap(shift)
    assert own > 2 * other, (own, other)


def test_long_tailed_vocabulary(threads: list[tuple[str, str, list[str]]]) -> None:
    counts = Counter(
        w.lower()
        for t, q, answers in threads
        for text in (t, q, *answers)
        for w in WORD.findall(text)
    )
    ranked = [c for _, c in counts.most_common()]
    total = sum(ranked)
    assert len(counts) > 3000  # thousands of distinct words
    assert sum(ranked[:10]) / total > 0.15  # a few very frequent words...
    assert sum(1 for c in ranked if c <= 2) > 1000  # ...and a long tail of rare ones
    assert ranked[0] / ranked[99] > 10  # Zipf-like decay
    # A 1000-word vocabulary cap drops a visible share of the running text.
    assert 0.05 < 1 - sum(ranked[:1000]) / total < 0.5


def test_prepare_synthetic(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    calls: list[tuple[int, int]] = []
    m = prepare_synthetic(
        out, size_bytes=300_000, seed=0, progress=lambda d, t: calls.append((d, t))
    )
    assert m["source"] == "synthetic:size=300000,seed=0" and m["format"] == "synthetic"
    assert m["pairs"] > 100 and m["questions"] > m["questions_answered"] > 0
    assert m["train_pairs"] > 0 and m["val_pairs"] > 0
    assert load_manifest(out) == m
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]  # no XML, no temp dir left
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "train.txt", "val.txt"]
    assert calls[-1][0] == calls[-1][1]
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    text = (out / "train.txt").read_text(encoding="utf-8") + (out / "val.txt").read_text()
    assert text.count(MARKER_CHARS["<Q>"]) == m["pairs"]
    assert "<Q>" in text  # literal text from bodies, not a marker
    assert (
        prepare_synthetic(tmp_path / "again", size_bytes=300_000, seed=0)["sha256"] == m["sha256"]
    )


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"size_bytes": 100, "seed": 0}, "at least"),
        ({"size_bytes": "5MB", "seed": 0}, "integer"),
        ({"size_bytes": 100_000, "seed": "x"}, "seed"),
    ],
)
def test_prepare_synthetic_bad_args(tmp_path: Path, kwargs: dict, needle: str) -> None:
    with pytest.raises(SweepsError, match=needle):
        prepare_synthetic(tmp_path / "out", **kwargs)
    assert list(tmp_path.iterdir()) == []
