"""A seeded synthetic Stack Exchange ``Posts.xml`` with structure a small model can learn.

The corpus is written as a real ``Posts.xml`` so the demo and the tests exercise the same parser
as a real dump. What makes it learnable beyond the unigram distribution (and makes a small word
vocabulary cap visibly hurt):
- a long-tailed vocabulary: thousands of pronounceable pseudo-words with Zipf frequencies, short
  words frequent (as in natural language), so a capped word vocabulary drops a real share of text;
- 40 topics, each with its own Zipf-distributed words, verbs and fixed stock phrases: within a
  post the topic is predictable from earlier words;
- named entities (capitalized invented first and last names, long-tailed, ~10^5 combinations):
  a question names one, and every answer repeats it along with the question's key topic words, so
  an answer is predictable from its question (copying), not from the unigram table.

Every choice comes from ``random.Random(seed)``: the same seed and size give the same bytes.
Text is built per post and written in ~1 MiB blocks, so 60 MB takes seconds, not minutes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from lm.errors import SweepsError

MIN_SIZE_BYTES = 10_000
N_TOPICS = 40
N_COMMON_WORDS = 6000
N_TOPIC_WORDS = 120
N_TOPIC_VERBS = 10
N_FIRST_NAMES = 400
N_LAST_NAMES = 700

_ONSETS = (
    *("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z"),
    *("br", "cr", "dr", "fl", "gr", "kl", "pr", "st", "tr", "sh", "ch", "th", "sk", "pl", ""),
)
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ou", "io", "y")
_CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "t", "nd", "rk", "st", "x")
_VERB_ENDINGS = ("ate", "ize", "en", "ify", "ect")

# "How do I ... the <topic word> of <Entity>?"-style titles; {v} verb, {t}/{u} topic words.
_TITLES = (
    "How do I {v} the {t} of {E}?",
    "Why does {E} {v} the {t} before the {u}?",
    "What is the best way to {v} {t} for {E}?",
    "Can {E} {v} a {t} without a {u}?",
    "Is it possible to {v} the {t} in {E}'s {u}?",
    "How should {E} {v} {t} and {u}?",
    "When does the {t} of {E} {v}?",
)
_OPENINGS = (
    "To {v} the {t} of {E}, {P}",
    "{E} can {v} the {t} if {P}",
    "The {t} of {E} is the key: {P}",
    "In my experience {E} does not {v} the {u} directly; {P}",
    "You can {v} the {t} of {E} when {P}",
)
# Rare literal text that looks like markup or the corpus markers: it must stay text downstream.
_ODDITIES = (
    "the literal <Q> tag",
    "a <script>alert(1)</script> snippet",
    "the <A> and <D> strings",
    "fish & chips",
    'a "quoted" word',
    "naïve café façade",
    "2 < 3 > 1",
)


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(
        rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
    )


def _unique_words(rng: random.Random, n: int, taken: set[str], lo: int, hi: int) -> list[str]:
    words: list[str] = []
    while len(words) < n:
        w = _word(rng, rng.randint(lo, hi))
        if len(w) >= 2 and w not in taken:
            taken.add(w)
            words.append(w)
    return words


def _zipf_cum(n: int, s: float = 1.05) -> list[float]:
    return list(accumulate(1.0 / (rank**s) for rank in range(1, n + 1)))


@dataclass
class _Topic:
    words: list[str]
    cum: list[float]
    verbs: list[str]
    phrases: list[str]  # fixed word sequences with {t} slots: topic-specific phrasing


class _Generator:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.rng = rng
        taken: set[str] = set()
        # Short words get the frequent ranks (Zipf's law of abbreviation), as in real text.
        common = _unique_words(rng, N_COMMON_WORDS, taken, 1, 3)
        common.sort(key=len)
        self.common = common
        self.common_cum = _zipf_cum(len(common))
        self.topics: list[_Topic] = []
        for _ in range(N_TOPICS):
            words = _unique_words(rng, N_TOPIC_WORDS, taken, 2, 3)
            verbs = [
                w + rng.choice(_VERB_ENDINGS)
                for w in _unique_words(rng, N_TOPIC_VERBS, taken, 1, 2)
            ]
            phrases = []
            for _ in range(6):
                (a, b), (c, d) = rng.sample(words[:30], 2), rng.sample(common[:200], 2)
                phrases.append(f"the {{t}} {c} {a} {rng.choice(verbs)}s {d} {b} {{t}}")
            self.topics.append(_Topic(words, _zipf_cum(len(words), 1.1), verbs, phrases))
        self.first = [w.capitalize() for w in _unique_words(rng, N_FIRST_NAMES, taken, 2, 2)]
        self.last = [w.capitalize() for w in _unique_words(rng, N_LAST_NAMES, taken, 2, 3)]
        self.first_cum = _zipf_cum(len(self.first), 0.9)
        self.last_cum = _zipf_cum(len(self.last), 0.9)
        self.topic_cum = _zipf_cum(N_TOPICS, 0.6)
        self.next_id = 1
        self.seconds = 0

    # -- text -------------------------------------------------------------------------------
    def entity(self) -> str:
        rng = self.rng
        first = rng.choices(self.first, cum_weights=self.first_cum)[0]
        return first + " " + rng.choices(self.last, cum_weights=self.last_cum)[0]

    def sentence(self, topic: _Topic, keys: list[str]) -> str:
        """Common filler with every third word from the topic (often one of the post's keys)."""
        rng = self.rng
        n = rng.randint(6, 18)
        words = rng.choices(self.common, cum_weights=self.common_cum, k=n)
        topical = rng.choices(topic.words, cum_weights=topic.cum, k=n // 3 + 1)
        for i in range(1, n, 3):
            words[i] = rng.choice(keys) if rng.random() < 0.3 else topical[i // 3]
        if rng.random() < 0.25:
            words.append(rng.choice(topic.phrases).format(t=rng.choice(keys)))
        if rng.random() < 0.01:
            words.append(rng.choice(_ODDITIES))
        text = " ".join(words)
        return text[0].upper() + text[1:] + rng.choice(".....?!;")

    def paragraph(self, topic: _Topic, keys: list[str], entity: str, mention: float) -> str:
        rng = self.rng
        sentences = [self.sentence(topic, keys) for _ in range(rng.randint(1, 5))]
        if rng.random() < mention:
            i = rng.randrange(len(sentences))
            sentences[i] = sentences[i][:-1] + f", as with {entity}" + sentences[i][-1]
        return " ".join(sentences)

    def code_block(self, topic: _Topic, keys: list[str]) -> str:
        rng = self.rng
        lines = []
        for _ in range(rng.randint(1, 4)):
            call = f"{rng.choice(topic.verbs)}({rng.choice(keys)}, {rng.randint(0, 99)})"
            lines.append(f"{rng.choice(keys)} = {call}")
        return "<pre><code>" + "\n".join(lines) + "\n</code></pre>"

    def body(self, paragraphs: list[str], topic: _Topic, keys: list[str]) -> str:
        """Body HTML: ``<p>`` paragraphs (text HTML-escaped), now and then a list or code."""
        rng = self.rng
        parts = []
        for p in paragraphs:
            p = _html_escape(p)
            r = rng.random()
            if r < 0.04:
                parts.append(f"<blockquote><p>{p}</p></blockquote>")
            elif r < 0.08:
                parts.append(f"<p><em>{p}</em></p>")
            else:
                parts.append(f"<p>{p}</p>")
        r = rng.random()
        if r < 0.08:
            parts.append(self.code_block(topic, keys))
        elif r < 0.14:
            items = "".join(
                f"<li>{_html_escape(self.sentence(topic, keys))}</li>" for _ in range(3)
            )
            parts.append(f"<ul>{items}</ul>")
        return "\n\n".join(parts) + "\n"

    # -- rows -------------------------------------------------------------------------------
    def row(self, post_type: int, body: str, *, title: str = "", parent: int = 0) -> str:
        rng = self.rng
        post_id = self.next_id
        self.next_id += 1
        self.seconds += rng.randint(30, 5000)
        days, rest = divmod(self.seconds, 86400)
        date = f"20{14 + days // 365:02d}-{1 + days % 365 // 31:02d}-{1 + days % 28:02d}"
        date += f"T{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}.000"
        attrs = f'Id="{post_id}" PostTypeId="{post_type}"'
        if parent:
            attrs += f' ParentId="{parent}"'
        attrs += f' CreationDate="{date}" Score="{rng.randint(-2, 40)}"'
        attrs += f' Body="{_xml_attr(body)}"'
        if title:
            attrs += f' Title="{_xml_attr(title)}"'
        return f"  <row {attrs} />\n"

    def thread(self) -> str:
        """One question and its answers (sometimes none), and now and then a tag-wiki post."""
        rng = self.rng
        topic = self.topics[rng.choices(range(N_TOPICS), cum_weights=self.topic_cum)[0]]
        entity = self.entity()
        t, u = rng.choices(topic.words[:60], cum_weights=topic.cum[:60], k=2)
        verb = rng.choice(topic.verbs)
        keys = [t, u, *rng.choices(topic.words, cum_weights=topic.cum, k=2)]
        title = rng.choice(_TITLES).format(v=verb, t=t, u=u, E=entity)
        paragraphs = [
            self.paragraph(topic, keys, entity, 1.0) for _ in range(rng.choice((1, 1, 2, 2, 3)))
        ]
        question_id = self.next_id
        rows = [self.row(1, self.body(paragraphs, topic, keys), title=title)]
        # A few questions stay unanswered, as in real dumps.
        n_answers = 0 if rng.random() < 0.04 else rng.choice((1, 1, 1, 2, 2, 2, 3, 3, 4))
        for _ in range(n_answers):
            phrase = rng.choice(topic.phrases).format(t=rng.choice(keys))
            opening = rng.choice(_OPENINGS).format(v=verb, t=t, u=u, E=entity, P=phrase) + "."
            paragraphs = [opening[0].upper() + opening[1:]] + [
                self.paragraph(topic, keys, entity, 0.5) for _ in range(rng.randint(0, 3))
            ]
            rows.append(self.row(2, self.body(paragraphs, topic, keys), parent=question_id))
        if rng.random() < 0.01:
            rows.append(
                self.row(rng.choice((4, 5)), self.body([self.sentence(topic, keys)], topic, keys))
            )
        return "".join(rows)


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xml_attr(text: str) -> str:
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\n", "&#xA;")
    )


_HEADER = '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n'
_FOOTER = "</posts>\n"


def write_synthetic_posts(
    path: Path,
    *,
    size_bytes: int,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Write a seeded synthetic ``Posts.xml`` of about ``size_bytes`` bytes to ``path``.

    The size is met to within one question thread (a few KB), so within 10 % from 50 KB up.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int):
        raise SweepsError(f"size must be an integer number of bytes, got {size_bytes!r}")
    if size_bytes < MIN_SIZE_BYTES:
        raise SweepsError(
            f"size must be at least {MIN_SIZE_BYTES} bytes for a synthetic corpus, "
            f"got {size_bytes}; pass a larger --size such as 1MB"
        )
    gen = _Generator(seed)
    target = size_bytes - len(_FOOTER)
    written = 0
    block: list[bytes] = [_HEADER.encode()]
    block_bytes = len(block[0])
    with path.open("wb") as f:
        while True:
            thread = gen.thread().encode("utf-8")
            total = written + block_bytes
            # Stop at whichever side of the target is nearer: with or without this thread.
            if total + len(thread) > target and total + len(thread) - target > target - total:
                break
            block.append(thread)
            block_bytes += len(thread)
            if block_bytes >= 1 << 20:
                f.write(b"".join(block))
                written += block_bytes
                block, block_bytes = [], 0
                if progress is not None:
                    progress(written, size_bytes)
            if written + block_bytes >= target:
                break
        block.append(_FOOTER.encode())
        f.write(b"".join(block))
        written += block_bytes + len(_FOOTER)
    if progress is not None:
        progress(written, size_bytes)
