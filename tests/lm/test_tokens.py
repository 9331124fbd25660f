"""The token cache: exact meta, reuse without encoding, concurrent callers, stale corpora."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lm import tokenizers as tk
from lm import tokens
from lm.errors import SweepsError
from lm.serialization import MARKER_CHARS
from tests.lm.corpora import history_corpus, make_corpus, text_bytes, write_manifest

REPO = Path(__file__).resolve().parents[2]
META_KEYS = {
    "kind",
    "vocab_size",
    "lowercase",
    "corpus_sha256",
    "dtype",
    "train_tokens",
    "val_tokens",
    "train_bytes",
    "val_bytes",
    "bytes_per_token",
    "unk_train",
    "unk_val",
    "unk_rate",
    "unigram_counts",
    "special_ids",
    "encode_seconds",
    "files",
}


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    train = [("the cat sat", "the cat ran"), ("the dog", "a cat")]
    val = [("the cow sat", "the cat flew!")]
    return make_corpus(tmp_path / "small", train, val)


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- meta and content -----------------------------------------------------------------------------


def test_word_cache_meta_is_exact(small: Path) -> None:
    cache = tokens.load_tokens(small, "word", 8)
    meta = cache.meta
    assert set(meta) >= META_KEYS
    # vocab: "the" 3, " cat" 3, " sat" 1 (ties by string: " cat" < "the"; " dog" < " ran" < " sat")
    assert cache.tokenizer.token_strings()[5:] == [" cat", "the", " dog"]
    _pad, unk, q, a, d, cat, the, dog = range(8)
    # val: <Q> the | cow | sat <A> the | cat | flew | !
    assert cache.val.tolist() == [q, the, unk, unk, a, the, cat, unk, unk]
    assert cache.val_nbytes.tolist() == [0, 3, 4, 4, 0, 3, 4, 5, 1]
    assert meta["val_tokens"] == 9 and meta["unk_val"] == 4
    assert meta["unk_rate"] == pytest.approx(4 / 9)
    assert meta["val_bytes"] == len("the cow sat") + len("the cat flew!") == 24
    # train: <Q>the cat sat<A>the cat ran<D><Q>the dog<A>a cat
    assert cache.train.tolist() == [q, the, cat, unk, a, the, cat, unk, d, q, the, dog, a, unk, cat]
    assert meta["train_tokens"] == 15 and meta["unk_train"] == 3
    assert meta["train_bytes"] == 11 + 11 + 7 + 5
    assert meta["unigram_counts"] == [0, 3, 2, 2, 1, 3, 3, 1]
    assert sum(meta["unigram_counts"]) == meta["train_tokens"]
    assert meta["bytes_per_token"] == pytest.approx((34 + 24) / (15 + 9))
    assert meta["special_ids"] == {"<pad>": 0, "<unk>": 1, "<Q>": 2, "<A>": 3, "<D>": 4}
    assert meta["dtype"] == "uint16" and cache.train.dtype == np.uint16
    assert cache.train_nbytes.dtype == np.uint16
    assert meta["kind"] == "word" and meta["vocab_size"] == 8 and meta["lowercase"] is False
    assert meta["corpus_sha256"] == json.loads((small / "manifest.json").read_text())["sha256"]
    assert cache.path == small / "cache" / "word-8"
    for name in meta["files"].values():
        assert (cache.path / name).is_file()
    assert isinstance(cache.train, np.memmap) and not cache.train.flags.writeable


@pytest.mark.parametrize(("kind", "size"), [("bpe", 1004), ("byte", 260), ("word", 3000)])
def test_cache_holds_the_encoded_real_text(kind: str, size: int, tmp_path: Path) -> None:
    corpus = history_corpus(tmp_path / "history")
    cache = tokens.load_tokens(corpus, kind, size)
    for split in ("train", "val"):
        marked = (corpus / f"{split}.txt").read_text(encoding="utf-8")
        ids, nbytes = cache.tokenizer.encode_marked(marked)
        assert np.array_equal(getattr(cache, split), ids)
        assert np.array_equal(getattr(cache, f"{split}_nbytes"), nbytes)
        assert cache.meta[f"{split}_bytes"] == text_bytes(marked)  # every text byte counted once
    counts = np.bincount(cache.train, minlength=size)
    assert cache.meta["unigram_counts"] == counts.tolist()
    assert cache.meta["encode_seconds"] > 0


def test_lowercase_cache_has_its_own_dir(small: Path) -> None:
    lower = tokens.load_tokens(small, "word", 8, lowercase=True)
    assert lower.path.name == "word-8-lower" and lower.meta["lowercase"] is True
    assert not lower.hit and tokens.load_tokens(small, "word", 8).path.name == "word-8"


def test_progress_reports_bytes_up_to_the_total(small: Path) -> None:
    seen: list[tuple[int, int]] = []
    tokens.load_tokens(small, "byte", 260, progress=lambda done, total: seen.append((done, total)))
    total = (small / "train.txt").stat().st_size + (small / "val.txt").stat().st_size
    assert seen and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_large_vocab_uses_uint32_ids(tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(66_000))
    corpus = make_corpus(tmp_path / "big", [(words, "w1 w2")], [("w3 w70000", "w65999")])
    cache = tokens.load_tokens(corpus, "word", 65_600)
    assert cache.meta["dtype"] == "uint32" and cache.train.dtype == np.uint32
    assert int(cache.train.max()) == 65_599
    # "w3" and "w65999" never occur without a leading space in train; " w70000" not at all
    assert cache.meta["unk_val"] == 3


def test_a_token_standing_for_more_than_65535_bytes_widens_nbytes(tmp_path: Path) -> None:
    huge = "x" * 70_000
    corpus = make_corpus(tmp_path / "c", [("a b", "a b")], [("a " + huge, "b")])
    cache = tokens.load_tokens(corpus, "word", 7)
    assert cache.meta["nbytes_dtype"] == "uint32" and cache.val_nbytes.dtype == np.uint32
    assert cache.val_nbytes.tolist() == [0, 1, 70_001, 0, 1]
    assert cache.meta["val_bytes"] == 70_003


# --- reuse ----------------------------------------------------------------------------------------


def test_second_call_is_a_hit_and_encodes_nothing(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tokens.load_tokens(small, "bpe", 270)
    assert first.hit is False

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cache hit must not train or encode")

    monkeypatch.setattr(tk.BPETokenizer, "encode_marked", boom)
    monkeypatch.setattr(tokens, "train_tokenizer", boom)
    second = tokens.load_tokens(small, "bpe", 270)
    assert second.hit is True
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)
    assert second.meta == first.meta
    assert second.tokenizer.to_json() == first.tokenizer.to_json()


def test_stale_corpus_sha_rebuilds(small: Path) -> None:
    old = tokens.load_tokens(small, "word", 7)
    (small / "train.txt").write_text(
        MARKER_CHARS["<Q>"] + "a new corpus" + MARKER_CHARS["<A>"] + "a new answer",
        encoding="utf-8",
    )
    write_manifest(small)
    new = tokens.load_tokens(small, "word", 7)
    assert new.hit is False
    assert new.meta["corpus_sha256"] != old.meta["corpus_sha256"]
    assert new.tokenizer.token_strings()[5:] == [" new", "a"]
    assert new.meta["train_tokens"] == 8
    assert tokens.load_tokens(small, "word", 7).hit is True
    leftovers = [
        p.name
        for p in (small / "cache").iterdir()
        if p.name.startswith(".") and not p.name.endswith(".lock")
    ]
    assert leftovers == []


def test_a_damaged_cache_is_rebuilt(small: Path) -> None:
    cache = tokens.load_tokens(small, "byte", 260)
    expected = np.array(cache.train)
    with open(cache.path / "train.bin", "r+b") as f:
        f.truncate(10)  # a half-written file never looks complete
    again = tokens.load_tokens(small, "byte", 260)
    assert again.hit is False and np.array_equal(again.train, expected)
    (again.path / "meta.json").write_text("{")
    assert tokens.load_tokens(small, "byte", 260).hit is False


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "size", "lowercase", "match"),
    [
        ("wordpiece", 1000, False, "unknown"),
        ("word", 5, False, "too small"),
        ("bpe", 100, False, "too small"),
        ("byte", 512, False, "260"),
        ("byte", 260, True, "lowercase"),
    ],
)
def test_bad_args_raise_and_write_nothing(
    small: Path, kind: str, size: int, lowercase: bool, match: str
) -> None:
    before = _listing(small)
    with pytest.raises(SweepsError, match=match):
        tokens.load_tokens(small, kind, size, lowercase=lowercase)
    assert _listing(small) == before


def test_missing_corpus_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(SweepsError, match="not found"):
        tokens.load_tokens(tmp_path / "missing", "byte", 260)
    assert list(tmp_path.iterdir()) == []


# --- two processes at once ------------------------------------------------------------------------

CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
from lm import tokens

corpus, go = Path(sys.argv[1]), Path(sys.argv[2])
real = tokens.train_tokenizer

def slow(*args, **kwargs):  # hold the build lock long enough for the other caller to queue up
    time.sleep(1.0)
    return real(*args, **kwargs)

tokens.train_tokenizer = slow
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
t0 = time.perf_counter()
cache = tokens.load_tokens(corpus, "bpe", 300)
digest = hashlib.sha256()
for name in ("train", "val", "train_nbytes", "val_nbytes"):
    digest.update(getattr(cache, name).tobytes())
print(json.dumps({"hit": cache.hit, "digest": digest.hexdigest(),
                  "seconds": time.perf_counter() - t0}), flush=True)
"""


def test_two_concurrent_callers_build_once_and_agree(tmp_path: Path) -> None:
    corpus = history_corpus(tmp_path / "history")
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(corpus), str(go)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        go.touch()  # both start together
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            child.kill()
    results = []
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["hit"] for r in results) == [False, True]  # one built, the other waited
    assert results[0]["digest"] == results[1]["digest"]
    waiter = next(r for r in results if r["hit"])
    assert waiter["seconds"] > 0.5  # it queued on the lock rather than finding a finished cache
    # What is on disk is complete and right, and no temporary dir is left behind.
    cache = tokens.load_tokens(corpus, "bpe", 300)
    assert cache.hit is True
    digest = hashlib.sha256()
    for name in ("train", "val", "train_nbytes", "val_nbytes"):
        digest.update(getattr(cache, name).tobytes())
    assert digest.hexdigest() == results[0]["digest"]
    ids, _ = cache.tokenizer.encode_marked((corpus / "val.txt").read_text(encoding="utf-8"))
    assert np.array_equal(cache.val, ids)
    assert sorted(p.name for p in (corpus / "cache").iterdir() if p.name != tk.TEXT_STAMP.name) == [
        ".bpe-300.lock",
        "bpe-300",
    ]


def test_a_failed_build_is_one_line_and_leaves_no_partial_cache(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tokens, "_encode_splits", disk_full)
    with pytest.raises(SweepsError, match="No space left on device while building"):
        tokens.load_tokens(small, "byte", 260)
    assert [p.name for p in (small / "cache").iterdir() if p.name != tk.TEXT_STAMP.name] == [
        ".byte-260.lock"
    ]


def test_a_corpus_file_that_is_not_utf8_is_a_one_line_error(small: Path) -> None:
    (small / "val.txt").write_bytes(b"\x1eok\x1f\xff\xfe broken")
    write_manifest(small)
    with pytest.raises(SweepsError, match=r"val\.txt: not valid UTF-8"):
        tokens.load_tokens(small, "byte", 260)


# --- a damaged cache of the right size ------------------------------------------------------------


def _damage(file: Path, offset: int, data: bytes) -> None:
    with open(file, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_ids_out_of_range_of_the_same_size_are_rebuilt(small: Path) -> None:
    cache = tokens.load_tokens(small, "word", 8)
    expected = np.array(cache.train)
    size = (cache.path / "train.bin").stat().st_size
    (cache.path / "train.bin").write_bytes(b"\xff" * size)  # the size check alone passes this
    again = tokens.load_tokens(small, "word", 8)
    assert again.hit is False
    assert np.array_equal(again.train, expected) and int(again.train.max()) < 8
    assert tokens.load_tokens(small, "word", 8).hit is True


def test_a_flipped_id_inside_the_vocabulary_is_rebuilt(small: Path) -> None:
    cache = tokens.load_tokens(small, "word", 8)
    expected = np.array(cache.val)
    assert expected[1] == 6  # "the"; 7 (" dog") is just as valid an id, only the wrong one
    _damage(cache.path / "val.bin", 2, bytes([7]))  # uint16 little-endian: the low byte
    again = tokens.load_tokens(small, "word", 8)
    assert again.hit is False and np.array_equal(again.val, expected)


def test_a_flipped_byte_in_the_nbytes_or_the_tokenizer_is_rebuilt(small: Path) -> None:
    cache = tokens.load_tokens(small, "word", 8)
    expected = np.array(cache.val_nbytes)
    _damage(cache.path / "val_nbytes.bin", 2, bytes([9]))  # bits per byte would divide by it
    assert tokens.load_tokens(small, "word", 8).hit is False
    text = (cache.path / "tokenizer.json").read_text(encoding="utf-8")
    (cache.path / "tokenizer.json").write_text(text.replace(" dog", " dig"), encoding="utf-8")
    again = tokens.load_tokens(small, "word", 8)
    assert again.hit is False and np.array_equal(again.val_nbytes, expected)
    assert again.tokenizer.token_strings()[-1] == " dog"


@pytest.mark.parametrize(
    "counts",
    [
        [0, 3, 2, 2, 1, 3, 3],  # truncated: one id short
        [0, 3, 2, 2, 1, 3, 3, 1, 0],  # one too many
        [0, 3, 2, 2, 1, 3, 3, 5],  # the right length, not the train tokens' count
        [-1, 3, 2, 2, 1, 3, 3, 2],  # negative, same sum
        [0, 3, 2, 2, 1, 3, 3, "1"],  # non-numeric
        [0, 3, 2, 2, 1, 3, 3, 1.5],  # not an integer
        [0, 3, 2, 2, 1, 3, 3, True],  # JSON true, an int to Python
        None,
    ],
)
def test_bad_unigram_counts_are_rebuilt(small: Path, counts: object) -> None:
    cache = tokens.load_tokens(small, "word", 8)
    expected = cache.meta["unigram_counts"]
    meta = json.loads((cache.path / "meta.json").read_text())
    meta["unigram_counts"] = counts
    (cache.path / "meta.json").write_text(json.dumps(meta))
    again = tokens.load_tokens(small, "word", 8)
    assert again.hit is False and again.meta["unigram_counts"] == expected


def test_an_intact_cache_is_a_hit_and_keeps_its_files(small: Path) -> None:
    cache = tokens.load_tokens(small, "bpe", 270)
    assert set(cache.meta["checksums"]) == set(tokens.FILES)
    before = {p.name: p.stat().st_mtime_ns for p in cache.path.iterdir()}
    inode = cache.path.stat().st_ino
    for _ in range(2):
        again = tokens.load_tokens(small, "bpe", 270)
        assert again.hit is True
    assert cache.path.stat().st_ino == inode  # not replaced by a rebuild
    assert {p.name: p.stat().st_mtime_ns for p in cache.path.iterdir()} == before


def test_a_cache_of_the_previous_format_is_rebuilt(small: Path) -> None:
    cache = tokens.load_tokens(small, "byte", 260)
    meta = json.loads((cache.path / "meta.json").read_text())
    meta["format"] = "lm.tokens/1"  # no checksums: nothing to check it against
    del meta["checksums"]
    (cache.path / "meta.json").write_text(json.dumps(meta))
    assert tokens.load_tokens(small, "byte", 260).hit is False


def test_sweeps_tokenize_rebuilds_a_damaged_cache(small: Path) -> None:
    cache = tokens.load_tokens(small, "word", 8)
    size = (cache.path / "train.bin").stat().st_size
    (cache.path / "train.bin").write_bytes(b"\xff" * size)

    def tokenize() -> str:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "sweeps",
                "tokenize",
                str(small),
                "--tokenizer",
                "word",
                "--vocab-size",
                "8",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    first, second = tokenize(), tokenize()
    assert re.search(r"cache\s+built", first), first
    assert re.search(r"cache\s+hit", second), second
    assert int(tokens.load_tokens(small, "word", 8).train.max()) < 8


RSS_CHILD = r"""
import json, sys
from pathlib import Path
from lm import tokens

def peak():  # VmHWM, not ru_maxrss: Linux carries a parent's ru_maxrss over fork and exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

before = peak()
cache = tokens.load_tokens(Path(sys.argv[1]), "byte", 260)
print(json.dumps({"hit": cache.hit, "grew": peak() - before}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads VmHWM from /proc")
def test_checking_a_cache_does_not_add_it_to_the_resident_set(tmp_path: Path) -> None:
    # A CPU trial's peak memory is its peak resident set, and the memory model counts only the token
    # pages training touches: the check must not read 70 MB of cache through the memmaps.
    text = "the quick brown fox jumps over the lazy dog " * 2000
    corpus = make_corpus(tmp_path / "c", [(text, text)] * 100, [("a b", "c d")])
    cache = tokens.load_tokens(corpus, "byte", 260)
    file_bytes = sum(getattr(cache, n).nbytes for n in ("train", "train_nbytes"))
    assert file_bytes > 64 * 2**20
    proc = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(corpus)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout)
    assert result["hit"] is True
    assert result["grew"] < 16 * 2**20, result
