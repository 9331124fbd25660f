"""An edited corpus is noticed (issue 24, item 3): truncating ``train.txt`` left the token cache
a "hit" with the old tokens, because the corpus identity was the manifest's stored hash. Now it
is the hash of the text as it is, kept with the files' sizes and modification times so that an
unchanged corpus is not hashed again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import lm.tokenizers
from lm.corpus import prepare_synthetic
from lm.tokenizers import TEXT_STAMP, corpus_sha256
from lm.tokens import load_tokens


@pytest.fixture()
def corpus(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp() / "identity-corpus-60KB"
    if not (base / "manifest.json").is_file():
        prepare_synthetic(base, size_bytes=60_000, seed=3)
    shutil.copytree(base, tmp_path / "corpus")
    return tmp_path / "corpus"


def test_a_truncated_train_split_is_re_tokenized(corpus: Path) -> None:
    first = load_tokens(corpus, "word", 300)
    assert load_tokens(corpus, "word", 300).hit
    text = (corpus / "train.txt").read_bytes()
    (corpus / "train.txt").write_bytes(text[: len(text) // 3])
    again = load_tokens(corpus, "word", 300)
    assert not again.hit and len(again.train) < len(first.train) * 0.5
    assert (
        again.meta["corpus_sha256"]
        == hashlib.sha256(text[: len(text) // 3] + (corpus / "val.txt").read_bytes()).hexdigest()
    )
    assert load_tokens(corpus, "word", 300).hit


def test_an_edit_of_the_same_size_is_noticed_and_a_touch_is_not_a_change(corpus: Path) -> None:
    load_tokens(corpus, "byte", 260)
    path = corpus / "val.txt"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: same text
    assert load_tokens(corpus, "byte", 260).hit
    data = bytearray(path.read_bytes())
    data[:5] = b"XXXXX"
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    cache = load_tokens(corpus, "byte", 260)
    assert not cache.hit
    assert cache.meta["corpus_sha256"] == corpus_sha256(corpus)


def test_an_unchanged_corpus_is_not_hashed_again(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = corpus_sha256(corpus)  # hashes once and writes the stamp
    assert (corpus / TEXT_STAMP).is_file()

    def no_hash(*args: object) -> None:
        raise AssertionError("hashed although sizes and modification times are unchanged")

    monkeypatch.setattr(lm.tokenizers.hashlib, "sha256", no_hash)
    assert corpus_sha256(corpus) == sha


def test_the_stamp_is_only_a_shortcut(corpus: Path) -> None:
    sha = corpus_sha256(corpus)
    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    assert sha == manifest["sha256"]  # as prepared: the manifest's identity
    (corpus / TEXT_STAMP).write_text("{not json", encoding="utf-8")
    assert corpus_sha256(corpus) == sha  # a damaged stamp: hashed again
