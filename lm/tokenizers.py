"""Tokenizers: capped word-level, byte-level BPE, and raw bytes; saved as JSON, never pickle.

Every kind maps text to ids in ``[0, vocab_size)``, where ``vocab_size`` counts every id the model
sees, specials included. The structural markers ``<Q>``, ``<A>``, ``<D>`` (and ``<pad>``, plus
``<unk>`` for ``word``) are special ids that encoding *user text* never produces: in corpus files a
marker is a control character (see ``lm.serialization``), so the literal text ``<Q>`` in a post is
just text, whichever tokenizer reads it.

- ``word``: lossless GPT-2-style pre-tokenization (each piece keeps its leading space), the
  ``vocab_size - 5`` most frequent pieces of the train split, everything else ``<unk>``. The
  classic capped setup whose failure (most targets ``<unk>``) the sweeps exist to catch, so every
  ``<unk>`` remembers the UTF-8 bytes of the piece it replaced, for bits-per-byte accounting.
- ``bpe``: byte-level BPE with the GPT-4 split pattern. Ranks are trained with ``rustbpe`` once per
  corpus at the largest size asked for; a smaller size is the same ranks truncated (merges are
  learned greedily in order, so the first ``k`` merges do not depend on how many follow). Encoding
  goes through a ``tiktoken.Encoding`` built from the ranks, with ``encode_ordinary`` so that
  text such as ``<|endoftext|>`` is never special.
- ``byte``: the 256 byte values.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import chain, repeat
from pathlib import Path
from typing import Any

import numpy as np

from lm.corpus import MANIFEST_NAME
from lm.errors import SweepsError
from lm.files import file_lock, write_json_atomic
from lm.serialization import ANSWER, DOC, MARKER_CHARS, PAD, QUESTION, UNK

KINDS: tuple[str, ...] = ("word", "bpe", "byte")
MARKERS: tuple[str, ...] = (QUESTION, ANSWER, DOC)
#: Special tokens of each kind, in id order. Word specials come first (ids 0-4); BPE and byte
#: specials follow the byte-level ids, so rank/byte ``i`` is id ``i``.
SPECIALS: dict[str, tuple[str, ...]] = {
    "word": (PAD, UNK, QUESTION, ANSWER, DOC),
    "bpe": (PAD, QUESTION, ANSWER, DOC),
    "byte": (PAD, QUESTION, ANSWER, DOC),
}
#: A sanity cap: ids are stored as uint32 at most, and nobody trains a model this wide here.
MAX_VOCAB_SIZE = 1 << 24
FORMAT = "lm.tokenizer/1"

# Python's \s matches the marker control characters (\x1d-\x1f are "separators" to str.isspace),
# so whitespace is spelled [^\S\x1d-\x1f] and each marker is a piece of its own. Then no piece
# spans a marker, a text segment splits the same alone or inside a corpus file (the lookahead
# (?!\S) sees a marker as it sees the end of the text), and the pieces concatenate back to the
# input: the split is lossless.
_MARK_CLASS = "\x1d\x1e\x1f"
WORD_PATTERN = rf"[{_MARK_CLASS}]| ?\w+| ?[^\s\w]+|[^\S{_MARK_CLASS}]+(?!\S)|[^\S{_MARK_CLASS}]+"
_WORD_RE = re.compile(WORD_PATTERN)
_MARK_SPLIT = re.compile(f"([{_MARK_CLASS}])")
_MARK_BYTES = {MARKER_CHARS[m].encode("ascii")[0]: m for m in MARKERS}


def _cpus() -> int:
    """CPUs this process may use (a trial may be pinned to a few)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_THREADS = max(1, min(8, _cpus()))  # BPE encoding threads


# --- arguments ------------------------------------------------------------------------------------


def min_vocab_size(kind: str) -> int:
    """The smallest legal ``vocab_size`` of a kind (the byte kind has exactly this size)."""
    return {"word": len(SPECIALS["word"]) + 1, "bpe": 256 + 4, "byte": 256 + 4}[kind]


def validate_tokenizer_args(
    kind: str, vocab_size: int, lowercase: bool = False, *, key: str = "vocab_size"
) -> None:
    """SweepsError (one line: what is wrong, how to fix it) for an unusable tokenizer request.
    ``key`` is where the size was given, and what the fix names: the config field and spec key
    ``vocab_size`` (a spec's reader puts its table in front: ``fixed.vocab_size``), or a flag
    such as ``--vocab-size`` on the command line."""
    if kind not in KINDS:
        raise SweepsError(f"tokenizer kind {kind!r} is unknown; use one of: {', '.join(KINDS)}")

    def given(value: object) -> str:  # ``vocab_size=300`` in a config, ``--vocab-size 300``
        return f"{key} {value}" if key.startswith("--") else f"{key}={value}"

    def use(value: int) -> str:
        return f"{key} {value}" if key.startswith("--") else f"{key} = {value}"

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise SweepsError(f"{key} must be an integer, got {given(repr(vocab_size))}")
    lowest = min_vocab_size(kind)
    n_special = len(SPECIALS[kind])
    if kind == "byte" and vocab_size != lowest:
        raise SweepsError(
            f"{given(vocab_size)} does not fit the byte tokenizer: it always has {lowest} ids "
            f"(256 bytes + {n_special} specials); use {use(lowest)}, or leave it out (its "
            "default follows the tokenizer)"
        )
    if vocab_size < lowest:
        what = "1 word" if kind == "word" else "256 byte tokens"
        raise SweepsError(
            f"{given(vocab_size)} is too small for the {kind} tokenizer: it needs at least "
            f"{lowest} ({n_special} specials + {what}); use {use(lowest)} or more"
        )
    if vocab_size > MAX_VOCAB_SIZE:
        raise SweepsError(f"{given(vocab_size)} is too large; use {use(MAX_VOCAB_SIZE)} or less")
    if not isinstance(lowercase, bool):
        raise SweepsError(f"lowercase must be true or false, got lowercase={lowercase!r}")
    if lowercase and kind != "word":
        raise SweepsError(
            f"lowercase applies only to the word tokenizer, not {kind}; set lowercase to false"
        )


# --- the tokenizers -------------------------------------------------------------------------------


class Tokenizer(ABC):
    """Text <-> ids. ``encode_marked`` reads corpus-file text (markers as control characters)."""

    kind: str
    vocab_size: int
    special_ids: dict[str, int]
    unk_id: int | None = None

    @property
    def pad_id(self) -> int:
        return self.special_ids[PAD]

    @abstractmethod
    def encode_text(self, text: str) -> list[int]:
        """User text -> ids; never a marker or ``<pad>`` id (``<unk>`` only for unknown words)."""

    @abstractmethod
    def encode_marked(self, marked: str) -> tuple[np.ndarray, np.ndarray]:
        """Corpus-file text -> ``(ids, nbytes)``, both uint32 arrays of one length.

        ``nbytes[i]`` is the number of UTF-8 bytes of user text that token ``i`` stands for:
        0 for a marker, the bytes of the replaced word for an ``<unk>``. So ``nbytes.sum()`` is
        the byte length of the text without its markers, whatever the tokenizer.
        """

    @abstractmethod
    def token_strings(self) -> list[str]:
        """Display form of each id (specials by name), for top-k tables."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, with markers shown as ``<Q>``/``<A>``/``<D>`` and ``<unk>``/``<pad>``."""

    @abstractmethod
    def _payload(self) -> dict[str, Any]:
        """The kind-specific part of ``to_json``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "special_ids": dict(self.special_ids),
            **self._payload(),
        }

    def save(self, path: Path) -> None:
        write_json_atomic(Path(path), self.to_json())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, vocab_size={self.vocab_size})"


class _ByteLevel(Tokenizer):
    """Shared by BPE and byte: ids ``< n`` stand for byte strings, then the 4 specials."""

    _token_bytes: list[bytes]

    def _init_byte_level(self, token_bytes: list[bytes]) -> None:
        self._token_bytes = token_bytes
        n = len(token_bytes)
        self.vocab_size = n + len(SPECIALS[self.kind])
        self.special_ids = {name: n + i for i, name in enumerate(SPECIALS[self.kind])}
        self._special_names = {i: name for name, i in self.special_ids.items()}
        self._marker_ids = {MARKER_CHARS[m]: self.special_ids[m] for m in MARKERS}
        # Per-id UTF-8 byte count (specials 0): nbytes of a whole array is one table lookup.
        self.nbytes_table = np.array(
            [len(b) for b in token_bytes] + [0] * len(self.special_ids), dtype=np.uint32
        )

    def decode(self, ids: Iterable[int]) -> str:
        out: list[str] = []
        buf = bytearray()
        for i in ids:
            i = int(i)
            if i < len(self._token_bytes):
                buf += self._token_bytes[i]
                continue
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
            out.append(self._special_names.get(i, UNK))
        out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)

    def token_strings(self) -> list[str]:
        shown = [b.decode("utf-8", errors="backslashreplace") for b in self._token_bytes]
        return shown + list(SPECIALS[self.kind])


class ByteTokenizer(_ByteLevel):
    """The 256 byte values, then ``<pad>``, ``<Q>``, ``<A>``, ``<D>``: 260 ids."""

    kind = "byte"

    def __init__(self) -> None:
        self._init_byte_level([bytes([i]) for i in range(256)])
        # Byte value -> (id, nbytes): a marker byte is its special id and stands for no text.
        self._byte_ids = np.arange(256, dtype=np.uint32)
        self._byte_nbytes = np.ones(256, dtype=np.uint32)
        for byte, marker in _MARK_BYTES.items():
            self._byte_ids[byte] = self.special_ids[marker]
            self._byte_nbytes[byte] = 0

    def encode_text(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_marked(self, marked: str) -> tuple[np.ndarray, np.ndarray]:
        raw = np.frombuffer(marked.encode("utf-8"), dtype=np.uint8)
        return self._byte_ids[raw], self._byte_nbytes[raw]

    def _payload(self) -> dict[str, Any]:
        return {}


class BPETokenizer(_ByteLevel):
    """Byte-level BPE: ``ranks[i]`` (the bytes of token ``i``) then the 4 specials."""

    kind = "bpe"

    def __init__(self, ranks: list[bytes], pattern: str) -> None:
        import tiktoken  # import here: the byte and word kinds do not need it

        if len(ranks) < 256:
            raise SweepsError(f"a BPE tokenizer needs the 256 byte ranks, got {len(ranks)}")
        self._init_byte_level(list(ranks))
        self.pattern = pattern
        self._encoding = tiktoken.Encoding(
            name=f"lm-bpe-{len(ranks)}",
            pat_str=pattern,
            mergeable_ranks={b: i for i, b in enumerate(ranks)},
            special_tokens={},
        )

    def encode_text(self, text: str) -> list[int]:
        # encode_ordinary: "<|endoftext|>" and friends in user text are text.
        return self._encoding.encode_ordinary(text)

    def encode_marked(self, marked: str) -> tuple[np.ndarray, np.ndarray]:
        parts = _MARK_SPLIT.split(marked)  # text, mark, text, ..., text
        texts, marks = parts[0::2], parts[1::2]
        encoded = self._encode_many(texts)
        pieces: list[list[int]] = [[]] * len(parts)
        pieces[0::2] = encoded
        pieces[1::2] = [[self._marker_ids[m]] for m in marks]
        total = sum(map(len, pieces))
        ids = np.fromiter(chain.from_iterable(pieces), dtype=np.uint32, count=total)
        return ids, self.nbytes_table[ids]  # fancy indexing: far faster than np.take here

    def _encode_many(self, texts: list[str]) -> list[list[int]]:
        """Encode many texts on several threads (tiktoken releases the GIL while encoding)."""
        enc = self._encoding.encode_ordinary
        if len(texts) < 2 * _THREADS or sum(map(len, texts)) < 1 << 16:
            return [enc(t) for t in texts]
        # A few large batches, not one task per text: per-task overhead would dominate.
        step = -(-len(texts) // (4 * _THREADS))
        batches = [texts[i : i + step] for i in range(0, len(texts), step)]
        with ThreadPoolExecutor(_THREADS) as pool:
            done = pool.map(lambda batch: [enc(t) for t in batch], batches)
            return [ids for batch in done for ids in batch]

    def _payload(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "ranks": [base64.b64encode(b).decode("ascii") for b in self._token_bytes],
        }


class WordTokenizer(Tokenizer):
    """``<pad> <unk> <Q> <A> <D>`` (ids 0-4), then the vocabulary pieces, most frequent first."""

    kind = "word"

    def __init__(self, pieces: list[str], *, lowercase: bool = False) -> None:
        self.pieces = list(pieces)
        self.lowercase = lowercase
        specials = SPECIALS["word"]
        self.vocab_size = len(specials) + len(self.pieces)
        self.special_ids = {name: i for i, name in enumerate(specials)}
        self.unk_id = self.special_ids[UNK]
        self._strings = list(specials) + self.pieces
        self._index = {p: len(specials) + i for i, p in enumerate(self.pieces)}
        if len(self._index) != len(self.pieces):
            raise SweepsError("a word tokenizer's pieces must be distinct; re-train it")
        # The corpus-file lookup also maps each marker character to its special id.
        self._marked_index = {**self._index}
        self._marked_index.update({MARKER_CHARS[m]: self.special_ids[m] for m in MARKERS})
        self._marker_ids = np.array([self.special_ids[m] for m in MARKERS], dtype=np.uint32)
        self.nbytes_table = np.array(
            [0] * len(specials) + [len(p.encode("utf-8")) for p in self.pieces], dtype=np.uint32
        )

    def _keys(self, pieces: list[str]) -> Iterable[str]:
        return map(str.lower, pieces) if self.lowercase else pieces

    def encode_text(self, text: str) -> list[int]:
        # A marker character in user text is not a known piece: it becomes <unk>, never a marker.
        pieces = _WORD_RE.findall(text)
        # map keeps dict.get's speed; mypy cannot pick an overload of get for map's two iterables
        return list(map(self._index.get, self._keys(pieces), repeat(self.unk_id)))  # type: ignore[arg-type]

    def encode_marked(self, marked: str) -> tuple[np.ndarray, np.ndarray]:
        pieces = _WORD_RE.findall(marked)
        n = len(pieces)
        got = map(self._marked_index.get, self._keys(pieces), repeat(self.unk_id))
        ids = np.fromiter(got, dtype=np.uint32, count=n)
        if self.lowercase and not marked.isascii():
            # Lowercasing can change a piece's byte length ("K" Kelvin sign -> "k"), and
            # nbytes counts the text as written, so measure every piece itself.
            nbytes = np.fromiter(map(len, map(str.encode, pieces)), dtype=np.uint32, count=n)
            nbytes[np.isin(ids, self._marker_ids)] = 0
            return ids, nbytes
        nbytes = self.nbytes_table[ids]
        unk_at = np.flatnonzero(ids == self.unk_id)
        if len(unk_at):
            nbytes[unk_at] = [len(pieces[i].encode("utf-8")) for i in unk_at]
        return ids, nbytes

    def decode(self, ids: Iterable[int]) -> str:
        strings = self._strings
        return "".join(strings[int(i)] if 0 <= int(i) < len(strings) else UNK for i in ids)

    def token_strings(self) -> list[str]:
        return list(self._strings)

    def _payload(self) -> dict[str, Any]:
        return {"lowercase": self.lowercase, "pattern": WORD_PATTERN, "pieces": self.pieces}


# --- JSON -----------------------------------------------------------------------------------------


def tokenizer_from_json(data: dict[str, Any]) -> Tokenizer:
    """The tokenizer ``to_json`` described; SweepsError when the data is not one."""
    try:
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, expected {FORMAT!r}")
        kind = data["kind"]
        tok: Tokenizer
        if kind == "byte":
            tok = ByteTokenizer()
        elif kind == "bpe":
            ranks = [base64.b64decode(r) for r in data["ranks"]]
            tok = BPETokenizer(ranks, data["pattern"])
        elif kind == "word":
            if data.get("pattern", WORD_PATTERN) != WORD_PATTERN:
                raise ValueError("it was made with another word pattern")
            tok = WordTokenizer(data["pieces"], lowercase=bool(data["lowercase"]))
        else:
            raise ValueError(f"unknown kind {kind!r}")
        if tok.vocab_size != data["vocab_size"]:
            raise ValueError(f"it has {tok.vocab_size} ids, not vocab_size={data['vocab_size']}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SweepsError(
            f"not a tokenizer file ({exc}); re-create it with `sweeps tokenize`"
        ) from None
    return tok


def load_tokenizer(path: Path) -> Tokenizer:
    """A tokenizer saved with ``Tokenizer.save``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepsError(f"{path}: no such tokenizer file; check the path") from None
    except (OSError, ValueError) as exc:
        raise SweepsError(f"{path}: not a readable tokenizer JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise SweepsError(f"{path}: not a tokenizer file; re-create it with `sweeps tokenize`")
    return tokenizer_from_json(data)


# --- files, locks and corpus dirs -----------------------------------------------------------------


def corpus_sha256(corpus_dir: Path) -> str:
    """The corpus identity: the sha256 of its text as it is now (``text_sha256``; the manifest's
    while the files are as prepared); SweepsError when it is no corpus dir."""
    corpus_dir = Path(corpus_dir)
    fix = f"create it with `sweeps prepare SOURCE --out {corpus_dir}`"
    if not corpus_dir.exists():
        raise SweepsError(f"corpus dir {corpus_dir}: not found; {fix}")
    if not corpus_dir.is_dir():
        raise SweepsError(
            f"corpus dir {corpus_dir}: not a directory; give the directory that "
            "`sweeps prepare --out` wrote"
        )
    manifest = corpus_dir / MANIFEST_NAME
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        sha = data["sha256"]
    except FileNotFoundError:
        raise SweepsError(f"corpus dir {corpus_dir}: no manifest.json; {fix}") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise SweepsError(f"{manifest}: not a valid corpus manifest; {fix}") from None
    if not isinstance(sha, str) or not sha:
        raise SweepsError(f"{manifest}: sha256 is missing; {fix}")
    for split in ("train.txt", "val.txt"):
        if not (corpus_dir / split).is_file():
            raise SweepsError(f"corpus dir {corpus_dir}: {split} is missing; {fix}")
    return text_sha256(corpus_dir, sha)


#: Where the text files' sizes and modification times are kept with the hash they were found to
#: have: beside the token caches, derived data like them (a re-prepare may keep it; it is then
#: checked like any other stamp).
TEXT_STAMP = Path("cache") / "text-stamp.json"


def _file_stamps(corpus_dir: Path) -> list[list[int]]:
    stats = [(corpus_dir / name).stat() for name in ("train.txt", "val.txt")]
    return [[st.st_size, st.st_mtime_ns] for st in stats]


def text_sha256(corpus_dir: Path, manifest_sha: str) -> str:
    """The sha256 of what ``train.txt`` and ``val.txt`` hold now (the manifest's identity is that
    of the text as prepared: an edited file would keep it, and stale tokens be trusted). Cheap
    when nothing changed: the files' sizes and modification times are compared with the stamp
    of the last hash (``TEXT_STAMP``); only when they differ, or there is none, are the files
    hashed again, and the stamp rewritten (best effort: a read-only corpus is hashed each time)."""
    from lm.files import write_json_atomic

    stamp_path = corpus_dir / TEXT_STAMP
    try:
        now = _file_stamps(corpus_dir)
    except OSError as exc:
        raise SweepsError(
            f"corpus dir {corpus_dir}: cannot read its text ({exc.strerror}); check its permissions"
        ) from None
    try:
        stamp = json.loads(stamp_path.read_text(encoding="utf-8"))
        if (
            isinstance(stamp, dict)
            and stamp.get("files") == now
            and isinstance(stamp.get("sha256"), str)
        ):
            return str(stamp["sha256"])  # a str: checked above
    except (OSError, ValueError):
        pass  # no stamp yet, or a damaged one: hash
    digest = hashlib.sha256()
    try:
        for name in ("train.txt", "val.txt"):  # the order the corpus identity is defined in
            with open(corpus_dir / name, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
    except OSError as exc:
        raise SweepsError(
            f"corpus dir {corpus_dir}: cannot read its text ({exc.strerror}); check its permissions"
        ) from None
    sha = digest.hexdigest()
    if _file_stamps(corpus_dir) == now:  # not changed while it was read: the stamp is true
        with contextlib.suppress(OSError):  # a read-only corpus: hashed again next time
            write_json_atomic(
                stamp_path, {"files": now, "sha256": sha, "manifest_sha256": manifest_sha}
            )
    return sha


def iter_marked_chunks(path: Path, chunk_bytes: int = 4 << 20) -> Iterator[tuple[str, int]]:
    """Stream a corpus file as ``(text, bytes_read)`` chunks cut just before a marker.

    Every tokenizer splits at markers anyway, so cutting there changes no token; a chunk only
    grows past ``chunk_bytes`` when a document has no marker for that long.
    """
    with open(path, "rb") as f:
        carry = b""  # starts with the marker of the last cut
        pending: list[bytes] = []  # blocks read since, with no marker in them
        while block := f.read(chunk_bytes):
            cut = max(block.rfind(m) for m in (b"\x1d", b"\x1e", b"\x1f"))
            if cut < 0:
                pending.append(block)
                continue
            head = b"".join([carry, *pending, block[:cut]])
            carry, pending = block[cut:], []
            if head:
                yield _decode(head, path), len(head)
        rest = b"".join([carry, *pending])
        if rest:
            yield _decode(rest, path), len(rest)


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SweepsError(
            f"{path}: not valid UTF-8 ({exc.reason}); re-create the corpus with `sweeps prepare`"
        ) from None


def iter_train_text(corpus_dir: Path) -> Iterator[str]:
    """The train split's user-text pieces, markers dropped (what tokenizers are trained on)."""
    for chunk, _ in iter_marked_chunks(Path(corpus_dir) / "train.txt"):
        for piece in _MARK_SPLIT.split(chunk):
            if piece and piece not in _MARK_CLASS:
                yield piece


# --- training (cached under corpus_dir/tokenizers/) -----------------------------------------------


def train_tokenizer(
    corpus_dir: Path, kind: str, vocab_size: int, *, lowercase: bool = False
) -> Tokenizer:
    """The tokenizer of ``kind`` and ``vocab_size`` for this corpus (trained on its train split).

    What training learns is cached under ``corpus_dir/tokenizers/`` for any size: the piece
    counts of the word kind and the BPE ranks at the largest size asked for so far.
    """
    validate_tokenizer_args(kind, vocab_size, lowercase)
    vocab_size = int(vocab_size)
    corpus_dir = Path(corpus_dir)
    sha = corpus_sha256(corpus_dir)
    if kind == "byte":
        return ByteTokenizer()
    try:
        return _train_cached(corpus_dir, sha, kind, vocab_size, lowercase)
    except OSError as exc:  # read-only corpus dir, disk full, ...
        raise SweepsError(
            f"{exc.filename or corpus_dir}: {exc.strerror or exc} while training the {kind} "
            f"tokenizer; check that {corpus_dir} is readable, writable and has room"
        ) from None


def _train_cached(
    corpus_dir: Path, sha: str, kind: str, vocab_size: int, lowercase: bool
) -> Tokenizer:
    if kind == "word":
        pieces = _word_counts(corpus_dir, sha, lowercase)["pieces"]
        wanted = vocab_size - len(SPECIALS["word"])
        if wanted > len(pieces):
            raise SweepsError(
                f"vocab_size={vocab_size} is more than this corpus has words: its train split "
                f"has {len(pieces)} distinct pieces (+5 specials); use --vocab-size "
                f"{len(pieces) + 5} or less"
            )
        return WordTokenizer(pieces[:wanted], lowercase=lowercase)
    n_ranks = vocab_size - len(SPECIALS["bpe"])
    data = _bpe_ranks(corpus_dir, sha, n_ranks)
    ranks = data["ranks"]
    if n_ranks > len(ranks):
        raise SweepsError(
            f"vocab_size={vocab_size} is more than this corpus can fill: BPE found only "
            f"{len(ranks) - 256} merges in its train split; use --vocab-size {len(ranks) + 4} "
            "or less"
        )
    return BPETokenizer([base64.b64decode(r) for r in ranks[:n_ranks]], data["pattern"])


def _tokenizer_dir(corpus_dir: Path) -> Path:
    return corpus_dir / "tokenizers"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _word_counts(corpus_dir: Path, sha: str, lowercase: bool) -> dict[str, Any]:
    """Every distinct piece of the train split, most frequent first (ties by piece string)."""
    path = _tokenizer_dir(corpus_dir) / f"word-counts{'-lower' if lowercase else ''}.json"

    def cached() -> dict[str, Any] | None:
        data = _read_json(path)
        ok = data and data.get("corpus_sha256") == sha and data.get("pattern") == WORD_PATTERN
        return data if ok else None

    if (data := cached()) is not None:
        return data
    with file_lock(_tokenizer_dir(corpus_dir) / ".lock"):
        if (data := cached()) is not None:  # another process counted while we waited
            return data
        counts: Counter[str] = Counter()
        for text in iter_train_text(corpus_dir):
            pieces = _WORD_RE.findall(text)
            counts.update(map(str.lower, pieces) if lowercase else pieces)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        data = {
            "format": "lm.word-counts/1",
            "corpus_sha256": sha,
            "lowercase": lowercase,
            "pattern": WORD_PATTERN,
            "pieces": [p for p, _ in ranked],
            "counts": [c for _, c in ranked],
        }
        write_json_atomic(path, data)
        return data


def _bpe_ranks(corpus_dir: Path, sha: str, n_ranks: int) -> dict[str, Any]:
    """BPE ranks of this corpus with at least ``n_ranks`` entries (or all the corpus allows)."""
    path = _tokenizer_dir(corpus_dir) / "bpe-ranks.json"

    def cached() -> dict[str, Any] | None:
        data = _read_json(path)
        if not data or data.get("corpus_sha256") != sha:
            return None
        big_enough = data.get("trained_ranks", 0) >= n_ranks or data.get("exhausted")
        return data if big_enough else None

    if (data := cached()) is not None:
        return data
    with file_lock(_tokenizer_dir(corpus_dir) / ".lock"):
        if (data := cached()) is not None:  # another process trained while we waited
            return data
        ranks, pattern = train_bpe_ranks(iter_train_text(corpus_dir), n_ranks)
        data = {
            "format": "lm.bpe-ranks/1",
            "corpus_sha256": sha,
            "pattern": pattern,
            "trained_ranks": n_ranks,
            # Fewer merges than asked: the corpus ran out of pairs; a larger size cannot help.
            "exhausted": len(ranks) < n_ranks,
            "ranks": [base64.b64encode(b).decode("ascii") for b in ranks],
        }
        write_json_atomic(path, data)
        return data


def train_bpe_ranks(texts: Iterable[str], n_ranks: int) -> tuple[list[bytes], str]:
    """Train rustbpe to ``n_ranks`` ranks (256 bytes + merges); the ranks and the split pattern."""
    import rustbpe

    trainer = rustbpe.Tokenizer()
    trainer.train_from_iterator(iter(texts), n_ranks)  # default pattern: GPT-4 style
    pairs = sorted(trainer.get_mergeable_ranks(), key=lambda p: p[1])
    ranks = [bytes(b) for b, _ in pairs]
    # tiktoken needs ranks 0..n-1, each a distinct non-empty byte string; check, not assume.
    contiguous = [r for _, r in pairs] == list(range(len(pairs)))
    if not contiguous or len(set(ranks)) != len(ranks) or not all(ranks):
        raise SweepsError(
            "rustbpe returned an inconsistent vocabulary (gaps or duplicate tokens);"
            " try another --vocab-size and report this"
        )
    return ranks, trainer.get_pattern()
