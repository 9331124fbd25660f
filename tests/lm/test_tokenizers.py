"""Tokenizers: special text stays text, exact <unk>/byte accounting, BPE truncation, JSON files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from lm import tokenizers as tk
from lm.errors import SweepsError
from lm.serialization import MARKER_CHARS, render, serialize_pair, split_marked
from tests.lm.corpora import history_corpus, history_pairs, make_corpus, text_bytes

SPECIAL_TEXT = (
    "Is <Q> a question? <A> and <D>, <pad>, <unk>, <|endoftext|> and <|im_start|> stay text."
)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return history_corpus(tmp_path_factory.mktemp("history"))


@pytest.fixture(scope="module")
def history_val(history: Path) -> str:
    return (history / "val.txt").read_text(encoding="utf-8")


# --- arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "vocab_size", "lowercase", "words"),
    [
        ("sentencepiece", 1000, False, ["'sentencepiece' is unknown", "word, bpe, byte"]),
        ("word", 5, False, ["vocab_size=5", "at least 6", "use vocab_size = 6"]),
        ("word", 0, False, ["vocab_size=0", "too small"]),
        ("bpe", 259, False, ["vocab_size=259", "at least 260"]),
        ("byte", 300, False, ["vocab_size=300", "260"]),
        ("byte", 256, False, ["vocab_size=256", "260"]),
        ("word", 1000.0, False, ["must be an integer"]),
        ("word", True, False, ["must be an integer"]),
        ("bpe", 1000, True, ["lowercase", "word tokenizer"]),
    ],
)
def test_bad_tokenizer_args_are_one_line_errors(
    kind: str, vocab_size: int, lowercase: bool, words: list[str]
) -> None:
    with pytest.raises(SweepsError) as err:
        tk.validate_tokenizer_args(kind, vocab_size, lowercase)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(("kind", "vocab_size"), [("word", 6), ("bpe", 260), ("byte", 260)])
def test_smallest_legal_sizes_pass(kind: str, vocab_size: int) -> None:
    tk.validate_tokenizer_args(kind, vocab_size)


def test_bad_args_or_corpus_create_nothing(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", [("q", "a")], [("q", "a")])
    before = sorted(p.name for p in corpus.iterdir())
    with pytest.raises(SweepsError, match="unknown"):
        tk.train_tokenizer(corpus, "unigram", 100)
    with pytest.raises(SweepsError, match="too small"):
        tk.train_tokenizer(corpus, "bpe", 100)
    assert sorted(p.name for p in corpus.iterdir()) == before
    missing = tmp_path / "nope"
    with pytest.raises(SweepsError, match="not found; create it with `sweeps prepare"):
        tk.train_tokenizer(missing, "byte", 260)
    assert not missing.exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SweepsError, match="not a directory"):
        tk.train_tokenizer(tmp_path / "file", "byte", 260)
    (corpus / "manifest.json").unlink()
    with pytest.raises(SweepsError, match=r"no manifest\.json"):
        tk.train_tokenizer(corpus, "word", 10)


def test_vocab_larger_than_the_corpus_allows_is_an_error(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", [("one two", "two three")], [("x", "y")])
    # pieces: "one", " two", "two", " three" -> at most 4 + 5 specials
    assert tk.train_tokenizer(corpus, "word", 9).vocab_size == 9
    with pytest.raises(SweepsError, match=r"has 4 distinct pieces.*--vocab-size 9 or less"):
        tk.train_tokenizer(corpus, "word", 10)
    with pytest.raises(SweepsError, match=r"found only \d+ merges"):
        tk.train_tokenizer(corpus, "bpe", 4000)


# --- special tokens never come out of user text ---------------------------------------------------


@pytest.fixture()
def special_corpus(tmp_path: Path) -> Path:
    alone = "\n".join(["<Q>", "<A>", "<D>", "<pad>", "<unk>", "<|endoftext|>"])
    pairs = [(SPECIAL_TEXT, "Answer: " + SPECIAL_TEXT), ("What about <Q><A>?", alone)]
    return make_corpus(tmp_path / "special", pairs * 3, pairs[:1])


def _every_piece_size(corpus: Path) -> int:
    text = (corpus / "train.txt").read_text(encoding="utf-8")
    pieces = {
        p
        for is_mark, t in split_marked(text)
        if not is_mark
        for p in re.findall(tk.WORD_PATTERN, t)
    }
    return len(pieces) + 5


@pytest.mark.parametrize("kind", tk.KINDS)
def test_special_token_text_round_trips_as_text(kind: str, special_corpus: Path) -> None:
    size = {"word": _every_piece_size(special_corpus), "bpe": 300, "byte": 260}[kind]
    tok = tk.train_tokenizer(special_corpus, kind, size)
    specials = set(tok.special_ids.values())
    for text in (SPECIAL_TEXT, "<Q>", "<A>", "<D>", "<pad>", "<unk>", "<|endoftext|>"):
        ids = tok.encode_text(text)
        assert not specials & set(ids), (kind, text, ids)
        assert tok.decode(ids) == text
    # In corpus-file text, special-looking text is still text and only the markers are special.
    marked = (special_corpus / "train.txt").read_text(encoding="utf-8")
    ids, nbytes = tok.encode_marked(marked)
    for name in ("<Q>", "<A>", "<D>"):
        assert np.count_nonzero(ids == tok.special_ids[name]) == marked.count(MARKER_CHARS[name])
    assert np.count_nonzero(ids == tok.pad_id) == 0
    assert tok.decode(ids) == render(marked)
    assert int(nbytes.sum()) == text_bytes(marked)
    assert np.all(nbytes[np.isin(ids, list(specials))] == 0)


@pytest.mark.parametrize("kind", tk.KINDS)
def test_a_stray_marker_character_in_user_text_is_not_a_marker(
    kind: str, special_corpus: Path
) -> None:
    size = {"word": 20, "bpe": 280, "byte": 260}[kind]
    tok = tk.train_tokenizer(special_corpus, kind, size)
    markers = {tok.special_ids[m] for m in ("<Q>", "<A>", "<D>")}
    assert not markers & set(tok.encode_text("a\x1eb\x1fc\x1d"))


# --- word tokenizer: exact <unk> and byte accounting ----------------------------------------------


def test_word_vocabulary_is_most_frequent_then_alphabetical(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", [("the cat sat", "the cat ran")], [("x", "y")])
    tok = tk.train_tokenizer(corpus, "word", 7)
    # counts: "the" 2, " cat" 2, " sat" 1, " ran" 1; the tie of 2 goes to " cat" (sorts first)
    assert tok.token_strings() == ["<pad>", "<unk>", "<Q>", "<A>", "<D>", " cat", "the"]
    assert tk.train_tokenizer(corpus, "word", 9).token_strings()[5:] == [
        " cat",
        "the",
        " ran",
        " sat",
    ]


def test_word_unk_and_replaced_bytes_are_exact(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", [("the cat sat", "the cat ran")], [("x", "y")])
    tok = tk.train_tokenizer(corpus, "word", 7)
    unk, q, a = tok.unk_id, tok.special_ids["<Q>"], tok.special_ids["<A>"]
    cat, the = 5, 6
    ids, nbytes = tok.encode_marked(serialize_pair("the cat sat", "the naïve dogs ran!"))
    # pieces: <Q> the | cat | sat | <A> the | naïve | dogs | ran | !
    assert ids.tolist() == [q, the, cat, unk, a, the, unk, unk, unk, unk]
    assert nbytes.tolist() == [0, 3, 4, 4, 0, 3, 7, 5, 4, 1]  # " naïve" is 7 bytes
    assert int(nbytes.sum()) == len(b"the cat sat") + len("the naïve dogs ran!".encode())
    assert np.count_nonzero(ids == unk) / len(ids) == 0.5
    assert tok.decode(ids) == "<Q>the cat<unk><A>the<unk><unk><unk><unk>"
    assert tok.encode_text("the cat sat") == [the, cat, unk]


def test_word_lowercase_looks_up_lowercase_but_counts_original_bytes(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", [("The CAT", "the kelvin")], [("x", "y")])
    tok = tk.train_tokenizer(corpus, "word", 8, lowercase=True)
    assert tok.token_strings()[5:] == ["the", " cat", " kelvin"]  # "The" + "the": 2
    assert (corpus / "tokenizers" / "word-counts-lower.json").is_file()
    # "\u212a" (KELVIN SIGN, 3 bytes) lowercases to "k" (1 byte): nbytes counts the original.
    marked = serialize_pair("THE Cat \u212aelvin", "the dog")
    ids, nbytes = tok.encode_marked(marked)
    assert tok.decode(ids) == "<Q>the cat kelvin<A>the<unk>"
    assert nbytes.tolist() == [0, 3, 4, 9, 0, 3, 4]
    assert int(nbytes.sum()) == text_bytes(marked)
    ascii_ids, ascii_nbytes = tok.encode_marked(serialize_pair("THE Cat", "the dog"))
    assert ascii_nbytes.tolist() == [0, 3, 4, 0, 3, 4]
    assert ascii_ids[-1] == tok.unk_id


def test_word_split_is_lossless_on_real_text(history_val: str) -> None:
    assert "".join(re.findall(tk.WORD_PATTERN, history_val)) == history_val


# --- byte accounting and streaming on real text ---------------------------------------------------


@pytest.mark.parametrize(("kind", "size"), [("bpe", 1004), ("byte", 260), ("word", 3000)])
def test_nbytes_sum_to_the_text_bytes_on_real_text(
    kind: str, size: int, history: Path, history_val: str
) -> None:
    tok = tk.train_tokenizer(history, kind, size)
    ids, nbytes = tok.encode_marked(history_val)
    assert int(nbytes.sum()) == text_bytes(history_val)
    assert ids.max() < tok.vocab_size
    if kind != "word":  # lossless: decoding gives the text back, markers shown by name
        assert tok.decode(ids) == render(history_val)
        assert np.array_equal(nbytes, tok.nbytes_table[ids])
    else:
        assert 0 < np.count_nonzero(ids == tok.unk_id) < len(ids) * 0.2


@pytest.mark.parametrize(("kind", "size"), [("bpe", 1004), ("byte", 260), ("word", 3000)])
def test_encoding_in_chunks_cut_at_markers_is_exact(
    kind: str, size: int, history: Path, tmp_path: Path
) -> None:
    tok = tk.train_tokenizer(history, kind, size)
    path = history / "val.txt"
    whole = path.read_text(encoding="utf-8")
    chunks = list(tk.iter_marked_chunks(path, chunk_bytes=20_000))
    assert len(chunks) > 3
    assert "".join(c for c, _ in chunks) == whole
    assert sum(n for _, n in chunks) == path.stat().st_size
    assert all(c[0] in "\x1d\x1e\x1f" for c, _ in chunks[1:])
    parts = [tok.encode_marked(c) for c, _ in chunks]
    ids, nbytes = tok.encode_marked(whole)
    assert np.array_equal(np.concatenate([p[0] for p in parts]), ids)
    assert np.array_equal(np.concatenate([p[1] for p in parts]), nbytes)


def test_a_long_stretch_without_markers_stays_one_chunk(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    text = "x" * 5000 + MARKER_CHARS["<A>"] + "y" * 5000 + MARKER_CHARS["<D>"] + "z" * 3000
    path.write_text(text, encoding="utf-8")
    chunks = [c for c, _ in tk.iter_marked_chunks(path, chunk_bytes=1000)]
    assert chunks == [
        "x" * 5000,
        MARKER_CHARS["<A>"] + "y" * 5000,
        MARKER_CHARS["<D>"] + "z" * 3000,
    ]


# --- BPE: trained once, truncated -----------------------------------------------------------------


def test_bpe_truncated_ranks_encode_exactly_like_direct_training(
    history: Path, history_val: str
) -> None:
    """Ranks trained to K, cut to k, are the ranks trained to k, so encodings agree on real text."""
    small, large = 300 + 4, 1000 + 4
    big = tk.train_tokenizer(history, "bpe", large)  # trains once at the largest size
    cut = tk.train_tokenizer(history, "bpe", small)  # truncated from the stored ranks
    ranks_file = json.loads((history / "tokenizers" / "bpe-ranks.json").read_text())
    assert ranks_file["trained_ranks"] >= large - 4

    direct_ranks, pattern = tk.train_bpe_ranks(tk.iter_train_text(history), small - 4)
    direct = tk.BPETokenizer(direct_ranks, pattern)
    assert cut.to_json()["ranks"] == direct.to_json()["ranks"]
    assert cut.to_json()["ranks"] == big.to_json()["ranks"][: small - 4]
    text = render(history_val)
    assert cut.encode_text(text) == direct.encode_text(text)
    assert np.array_equal(cut.encode_marked(history_val)[0], direct.encode_marked(history_val)[0])
    # ... and the size matters: the larger vocabulary does encode differently (shorter).
    assert len(big.encode_text(text)) < len(cut.encode_text(text))


def test_bpe_trains_again_only_for_a_larger_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pairs = [p for i, p in enumerate(history_pairs()) if i % 10 == 0]
    corpus = make_corpus(tmp_path / "c", pairs, pairs[:2])
    calls: list[int] = []
    real = tk.train_bpe_ranks

    def counting(texts, n_ranks):  # type: ignore[no-untyped-def]
        calls.append(n_ranks)
        return real(texts, n_ranks)

    monkeypatch.setattr(tk, "train_bpe_ranks", counting)
    a = tk.train_tokenizer(corpus, "bpe", 400)
    tk.train_tokenizer(corpus, "bpe", 300)
    b = tk.train_tokenizer(corpus, "bpe", 700)
    c = tk.train_tokenizer(corpus, "bpe", 400)
    tk.train_tokenizer(corpus, "bpe", 600)
    assert calls == [396, 696]
    assert a.to_json()["ranks"] == c.to_json()["ranks"] == b.to_json()["ranks"][:396]
    assert c.vocab_size == 400 and c.special_ids == {
        "<pad>": 396,
        "<Q>": 397,
        "<A>": 398,
        "<D>": 399,
    }


def test_a_changed_corpus_trains_afresh(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "c", [("aaa bbb", "aaa")], [("x", "y")])
    first = tk.train_tokenizer(corpus, "word", 7)
    make_corpus(corpus, [("ccc ddd", "ddd")], [("x", "y")])
    second = tk.train_tokenizer(corpus, "word", 7)
    assert first.token_strings()[5:] == ["aaa", " bbb"]
    assert second.token_strings()[5:] == [" ddd", "ccc"]


# --- files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "size"), [("bpe", 700), ("byte", 260), ("word", 2000)])
def test_save_and_load_give_the_same_tokenizer(
    kind: str, size: int, history: Path, history_val: str, tmp_path: Path
) -> None:
    tok = tk.train_tokenizer(history, kind, size)
    tok.save(tmp_path / "tok.json")
    data = json.loads((tmp_path / "tok.json").read_text(encoding="utf-8"))
    assert data["kind"] == kind and data["vocab_size"] == size
    again = tk.load_tokenizer(tmp_path / "tok.json")
    assert type(again) is type(tok)
    assert again.token_strings() == tok.token_strings()
    assert len(tok.token_strings()) == size
    assert again.special_ids == tok.special_ids
    ids, nbytes = again.encode_marked(history_val)
    assert np.array_equal(ids, tok.encode_marked(history_val)[0])
    assert np.array_equal(nbytes, tok.encode_marked(history_val)[1])


def test_loading_a_bad_tokenizer_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(SweepsError, match="no such tokenizer file"):
        tk.load_tokenizer(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SweepsError, match="not a readable tokenizer JSON"):
        tk.load_tokenizer(bad)
    bad.write_text(json.dumps({"format": tk.FORMAT, "kind": "word", "vocab_size": 9}))
    with pytest.raises(SweepsError, match="not a tokenizer file"):
        tk.load_tokenizer(bad)
    bad.write_text(json.dumps(tk.ByteTokenizer().to_json() | {"vocab_size": 300}))
    with pytest.raises(SweepsError, match="260 ids"):
        tk.load_tokenizer(bad)


def test_ids_and_display_strings_per_kind() -> None:
    byte = tk.ByteTokenizer()
    assert byte.vocab_size == 260 and byte.unk_id is None
    assert byte.special_ids == {"<pad>": 256, "<Q>": 257, "<A>": 258, "<D>": 259}
    assert byte.token_strings()[ord("a")] == "a" and byte.token_strings()[0xFF] == "\\xff"
    assert byte.decode(byte.encode_text("héllo")) == "héllo"
    word = tk.WordTokenizer(["x"])
    assert word.pad_id == 0 and word.unk_id == 1 and word.vocab_size == 6
    assert word.decode([2, 5, 3, 1, 4, 0]) == "<Q>x<A><unk><D><pad>"
