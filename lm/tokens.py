"""The token cache: a corpus encoded once per tokenizer, shared by every trial as memmaps.

Tokenizing on the fly in the data loader repeats the same work in every trial and every epoch;
here each (corpus sha, kind, vocab size, lowercase) is encoded once into
``corpus_dir/cache/<kind>-<vocab_size>[-lower]/``:

- ``train.bin``, ``val.bin``: the ids, ``uint16`` (``uint32`` when ``vocab_size > 65536``);
- ``train_nbytes.bin``, ``val_nbytes.bin``: per token, the UTF-8 bytes of user text it stands for
  (0 for a marker, the replaced word's bytes for an ``<unk>``), what bits per byte divides by;
  ``uint16``, or ``uint32`` when some token stands for more than 65,535 bytes;
- ``tokenizer.json``: the tokenizer that made the ids, so a cache is self-contained;
- ``meta.json``: counts, bytes, ``<unk>`` statistics, the train split's unigram counts, and a
  CRC-32 of every file above.

Trust: a cache is opened only after it is checked, because a trial cannot survive a bad one (an id
``>= vocab_size`` is an IndexError in the embedding; unigram counts of the wrong length break the
collapse statistics): each file's size and CRC-32 must match meta.json, every id must be below
the vocabulary size, and the unigram counts must be ``vocab_size`` non-negative integers summing
to the train tokens. A cache failing any check is *rebuilt* under the lock, not refused: it is
derived data, fully determined by the corpus (whose sha it records: that of the text files as
they are now, ``lm.tokenizers.text_sha256``, so an edited ``train.txt`` is re-tokenized; their
sizes and modification times are compared first, the files hashed only when those changed) and
the tokenizer settings, so
a rebuild restores it with no one's help, while a refusal would fail every trial of a sweep until
someone deleted a dir by hand. Only a cache that fails its checks right after being built is an
error (the disk does not keep what is written). The files are checked with plain reads into one
small buffer, not through the memmaps: a page read through a mapping counts in the process's
resident set (``ru_maxrss``, what a CPU trial's peak memory is), and the memory model counts only
the token pages a trial touches. Cost, once per open: about 1.5 s per GB of cache on one core
(0.5 s for 400 MB in the page cache; 40 ms for a 13 MB cache, twice an unchecked open).

Concurrency: a caller that misses takes an ``flock`` beside the cache dir, looks again (another
process may have built it meanwhile), builds into a temporary dir in the same parent and renames
it into place. Readers never lock: a dir is either absent or complete. So two processes asking at
once get one build and one hit, and nobody reads a half-written file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lm.corpus import MANIFEST_NAME
from lm.errors import SweepsError
from lm.files import file_lock, write_json_atomic
from lm.tokenizers import (
    Tokenizer,
    corpus_sha256,
    iter_marked_chunks,
    load_tokenizer,
    train_tokenizer,
    validate_tokenizer_args,
)

Progress = Callable[[int, int], None]

FORMAT = "lm.tokens/2"  # /2: meta.json holds the CRC-32 of every file
FILES: dict[str, str] = {
    "train": "train.bin",
    "val": "val.bin",
    "train_nbytes": "train_nbytes.bin",
    "val_nbytes": "val_nbytes.bin",
    "tokenizer": "tokenizer.json",
}
META_NAME = "meta.json"
#: Bytes per token assumed when the token cache has not been built yet (a BPE-like ratio; the
#: byte tokenizer's one byte a token, its markers standing for none).
GUESS_BYTES_PER_TOKEN = 4.0
GUESS_BYTE_TOKENIZER = 1.0
_UINT16_MAX = np.iinfo(np.uint16).max
_SCAN_BYTES = 1 << 20  # a multiple of every dtype's itemsize, so no id straddles two pieces


@dataclass(frozen=True)
class TextRate:
    """Bytes of user text per token of one tokenizer on one corpus: the training split's (what
    a budget in bytes converts with, ``lm.budget``) and the validation split's (``eval_bytes``).
    ``measured`` on the token cache, else estimated (no cache yet). The ``<unk>`` shares of the
    validation split (tokens, and the bytes those tokens stand for), where known."""

    train: float
    val: float
    measured: bool
    unk_tokens: float | None = None
    unk_bytes: float | None = None

    def __post_init__(self) -> None:
        for name in ("train", "val"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise SweepsError(f"bytes per token must be > 0, got {name}={value!r}")


def guessed_rate(tokenizer: str) -> TextRate:
    """The rate assumed before the token cache exists."""
    per = GUESS_BYTE_TOKENIZER if tokenizer == "byte" else GUESS_BYTES_PER_TOKEN
    return TextRate(per, per, measured=False)


@dataclass
class TokenCache:
    """One encoded corpus: read-only memmaps of ids and per-token bytes, plus ``meta.json``."""

    path: Path
    meta: dict[str, Any]
    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray
    train_nbytes: np.ndarray
    val_nbytes: np.ndarray
    hit: bool


def cache_dir(corpus_dir: Path, kind: str, vocab_size: int, lowercase: bool = False) -> Path:
    """Where the cache of this tokenizer lives inside a corpus dir."""
    return Path(corpus_dir) / "cache" / f"{kind}-{vocab_size}{'-lower' if lowercase else ''}"


@dataclass(frozen=True)
class CorpusCounts:
    """Token counts of a corpus's two splits for one tokenizer, as the memory estimate takes them
    (``lm.memory.estimate(counts=)``); None where unknown (no cache, no manifest)."""

    train_tokens: int | None = None
    val_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("train_tokens", "val_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise SweepsError(f"{name} must be a count >= 0 or None, got {name}={value!r}")


def corpus_counts(
    corpus_dir: Path | str, kind: str, vocab_size: int, lowercase: bool = False
) -> CorpusCounts:
    """The token counts of this corpus and tokenizer, without building anything.

    Exact from the token cache's ``meta.json`` when it has been built; else guessed from the
    corpus manifest's split sizes in bytes (one token per byte for the byte tokenizer,
    ``GUESS_BYTES_PER_TOKEN`` otherwise); else unknown. Never raises for a missing or damaged
    file: the counts only refine an estimate.
    """
    meta = _read_json(cache_dir(Path(corpus_dir), kind, vocab_size, lowercase) / META_NAME)
    try:
        return CorpusCounts(int(meta["train_tokens"]), int(meta["val_tokens"]))
    except (KeyError, TypeError, ValueError, SweepsError):
        pass
    manifest = _read_json(Path(corpus_dir) / MANIFEST_NAME)
    per = GUESS_BYTE_TOKENIZER if kind == "byte" else GUESS_BYTES_PER_TOKEN
    try:
        return CorpusCounts(int(manifest["train_bytes"] / per), int(manifest["val_bytes"] / per))
    except (KeyError, TypeError, ValueError, SweepsError):
        return CorpusCounts()


def token_ceiling(
    corpus_dir: Path | str, kind: str, vocab_size: int, lowercase: bool = False
) -> CorpusCounts:
    """The most tokens each split can hold with this tokenizer, without building anything: exact
    from this corpus's token cache when it has been built, else a bound from the split files'
    sizes (every token, a marker included, stands for at least one byte of the file; lowercasing
    can grow a character by half, e.g. U+0130 from 2 bytes to 3). None where unknown. A split
    under ``seq_len + 1`` by this bound can never hold a window (``lm.train.TooLittleData``)."""
    corpus_dir = Path(corpus_dir)
    meta = _read_json(cache_dir(corpus_dir, kind, vocab_size, lowercase) / META_NAME)
    try:
        if meta["corpus_sha256"] == corpus_sha256(corpus_dir):
            return CorpusCounts(int(meta["train_tokens"]), int(meta["val_tokens"]))
    except (KeyError, TypeError, ValueError, SweepsError):
        pass  # no cache (or a stale one): bound it from the text
    grow = 1.5 if lowercase else 1.0
    counts: list[int | None] = []
    for name in ("train.txt", "val.txt"):
        try:
            counts.append(int((corpus_dir / name).stat().st_size * grow))
        except OSError:
            counts.append(None)
    return CorpusCounts(*counts)


def text_rate(cache: TokenCache) -> TextRate:
    """This cache's bytes of text per token (training and validation splits) and the ``<unk>``
    shares of its validation split (``lm.budget``). A cache built before the ``<unk>`` bytes
    were counted gets them from its memmaps (the validation split only: a few percent)."""
    meta = cache.meta
    unk_id = cache.tokenizer.unk_id
    val_tokens, val_bytes = int(meta["val_tokens"]), int(meta["val_bytes"])
    unk_tokens = unk_bytes = None
    if unk_id is not None:
        unk_tokens = meta.get("unk_val", 0) / val_tokens if val_tokens else 0.0
        n = meta.get("unk_bytes_val")
        if n is None:
            n = int(cache.val_nbytes[np.asarray(cache.val) == unk_id].sum(dtype=np.int64))
        unk_bytes = n / val_bytes if val_bytes else 0.0
    else:
        unk_tokens = unk_bytes = 0.0
    return TextRate(
        train=_per_token(meta["train_bytes"], meta["train_tokens"]),
        val=_per_token(val_bytes, val_tokens),
        measured=True,
        unk_tokens=unk_tokens,
        unk_bytes=unk_bytes,
    )


def _per_token(n_bytes: int, n_tokens: int) -> float:
    # A split of markers only has no text; 1 keeps a budget in bytes finite (and is exact for
    # the byte tokenizer's text).
    return n_bytes / n_tokens if n_tokens and n_bytes else 1.0


def measured_rate(
    corpus_dir: Path | str,
    kind: str,
    vocab_size: int,
    lowercase: bool = False,
    progress: Progress | None = None,
) -> TextRate:
    """The rate of this tokenizer on this corpus, building its token cache if needed (the
    trial would build it anyway)."""
    return text_rate(
        load_tokens(Path(corpus_dir), kind, vocab_size, lowercase=lowercase, progress=progress)
    )


def cached_rate(
    corpus_dir: Path | str, kind: str, vocab_size: int, lowercase: bool = False
) -> TextRate | None:
    """The rate from a token cache that exists and is of this corpus as it is now, without
    building anything; None otherwise."""
    corpus_dir = Path(corpus_dir)
    meta = _read_json(cache_dir(corpus_dir, kind, vocab_size, lowercase) / META_NAME)
    try:
        if meta["corpus_sha256"] != corpus_sha256(corpus_dir):
            return None
        val_tokens, val_bytes = int(meta["val_tokens"]), int(meta["val_bytes"])
        has_unk = meta.get("unk_id") is not None
        unk_bytes = meta.get("unk_bytes_val")
        return TextRate(
            train=_per_token(meta["train_bytes"], meta["train_tokens"]),
            val=_per_token(val_bytes, val_tokens),
            measured=True,
            unk_tokens=(meta.get("unk_val", 0) / val_tokens if val_tokens else 0.0)
            if has_unk
            else 0.0,
            unk_bytes=(unk_bytes / val_bytes if val_bytes else 0.0)
            if has_unk and unk_bytes is not None
            else (None if has_unk else 0.0),
        )
    except (KeyError, TypeError, ValueError, SweepsError):
        return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def ids_dtype(vocab_size: int) -> np.dtype:
    """uint16 holds ids ``< 65536``; larger vocabularies need uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def load_tokens(
    corpus_dir: Path,
    kind: str,
    vocab_size: int,
    *,
    lowercase: bool = False,
    progress: Progress | None = None,
) -> TokenCache:
    """The token cache of this corpus and tokenizer: opened on a hit, built (once) on a miss.

    Arguments and the corpus dir are checked before anything is written; a cache whose corpus
    sha differs from the manifest's (the corpus was re-prepared), or that fails its checks
    (damaged: see the module docstring), is rebuilt.
    """
    validate_tokenizer_args(kind, vocab_size, lowercase)
    vocab_size = int(vocab_size)  # a numpy integer from a sampler would not go into JSON
    corpus_dir = Path(corpus_dir)
    sha = corpus_sha256(corpus_dir)
    path = cache_dir(corpus_dir, kind, vocab_size, lowercase)
    want = {"corpus_sha256": sha, "kind": kind, "vocab_size": vocab_size, "lowercase": lowercase}
    cache = _open(path, want)
    if cache is not None:
        return cache
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.parent / f".{path.name}.lock"):
            cache = _open(path, want)  # built by another process while we waited for the lock
            if cache is not None:
                return cache
            _build(corpus_dir, path, want, progress)
            cache = _open(path, want)
    except OSError as exc:  # read-only corpus dir, disk full, ...
        raise SweepsError(
            f"{exc.filename or path}: {exc.strerror or exc} while building the token cache; "
            f"check that {corpus_dir} is readable, writable and has room"
        ) from None
    if cache is None:  # pragma: no cover - the disk lost what was just written, or a bug
        raise SweepsError(
            f"{path}: the token cache just built fails its checks (is the disk failing?); "
            "delete the dir and retry"
        )
    cache.hit = False
    return cache


# --- opening --------------------------------------------------------------------------------------


def _open(path: Path, want: dict[str, Any]) -> TokenCache | None:
    """The cache at ``path`` if it is complete, made from ``want`` and passes its checks (see the
    module docstring); None otherwise, and the caller rebuilds it."""
    try:
        meta = _read_meta(path)
        if meta is None or meta.get("format") != FORMAT:
            return None
        if any(meta.get(k) != v for k, v in want.items()):
            return None  # stale: another corpus sha (re-prepared corpus) or another tokenizer
        if not _unigram_counts_ok(meta["unigram_counts"], want["vocab_size"], meta):
            return None
        dtype, nb_dtype = np.dtype(meta["dtype"]), np.dtype(meta["nbytes_dtype"])
        arrays = {}
        for split in ("train", "val"):
            n, files = int(meta[f"{split}_tokens"]), meta["files"]
            arrays[split] = _memmap(path / files[split], dtype, n)
            arrays[f"{split}_nbytes"] = _memmap(path / files[f"{split}_nbytes"], nb_dtype, n)
        if not _files_ok(path, meta, dtype, want["vocab_size"]):
            return None
        tokenizer = load_tokenizer(path / meta["files"]["tokenizer"])
    except (OSError, KeyError, TypeError, ValueError, SweepsError, _Truncated):
        return None  # missing, half-replaced by a concurrent rebuild, or damaged: rebuild
    if tokenizer.vocab_size != want["vocab_size"]:
        return None
    return TokenCache(path=path, meta=meta, tokenizer=tokenizer, hit=True, **arrays)


def _unigram_counts_ok(counts: Any, vocab_size: int, meta: dict[str, Any]) -> bool:
    """``vocab_size`` non-negative integers that sum to the train tokens (JSON ints load as int;
    a bool is an int to Python, not to JSON, so it is refused too)."""
    return (
        isinstance(counts, list)
        and len(counts) == vocab_size
        and all(type(c) is int and c >= 0 for c in counts)
        and sum(counts) == meta["train_tokens"]
    )


def _files_ok(path: Path, meta: dict[str, Any], dtype: np.dtype, vocab_size: int) -> bool:
    """Every file's CRC-32 matches meta.json, and every id is below ``vocab_size``."""
    checksums = meta["checksums"]
    for key in FILES:
        ids = dtype if key in ("train", "val") else None
        crc, top = _scan(path / meta["files"][key], ids)
        if crc != checksums[key] or (top is not None and top >= vocab_size):
            return False
    return True


def _scan(file: Path, ids: np.dtype | None = None) -> tuple[str, int | None]:
    """The file's CRC-32 (8 hex digits) and, for an ids file (``ids`` its dtype), its largest id.

    Read in pieces into one buffer rather than through a memmap, so that checking a large cache
    adds 1 MiB to the resident set instead of the whole file (see the module docstring).
    """
    crc, top = 0, None
    buffer = bytearray(_SCAN_BYTES)
    view = memoryview(buffer)
    with open(file, "rb") as f:
        while n := f.readinto(buffer):  # a buffered reader fills the buffer until end of file
            piece = view[:n]
            crc = zlib.crc32(piece, crc)
            if ids is not None and n >= ids.itemsize:
                largest = int(np.frombuffer(piece, dtype=ids, count=n // ids.itemsize).max())
                top = largest if top is None else max(top, largest)
    return f"{crc:08x}", top


def _read_meta(path: Path) -> dict[str, Any] | None:
    meta = json.loads((path / META_NAME).read_text(encoding="utf-8"))
    return meta if isinstance(meta, dict) else None


class _Truncated(Exception):
    """A cache file whose size disagrees with meta.json."""


def _memmap(file: Path, dtype: np.dtype, n: int) -> np.ndarray:
    if file.stat().st_size != n * dtype.itemsize:
        raise _Truncated(file)
    if n == 0:
        return np.zeros(0, dtype=dtype)  # mmap cannot map an empty file
    return np.memmap(file, dtype=dtype, mode="r", shape=(n,))


# --- building -------------------------------------------------------------------------------------


class _NBytesOverflow(Exception):
    """A token stands for more than 65,535 bytes (a huge unknown word): use uint32 nbytes."""


def _build(corpus_dir: Path, path: Path, want: dict[str, Any], progress: Progress | None) -> None:
    kind, vocab_size, lowercase = want["kind"], want["vocab_size"], want["lowercase"]
    started = time.perf_counter()
    tokenizer = train_tokenizer(corpus_dir, kind, vocab_size, lowercase=lowercase)
    tokenizer_seconds = time.perf_counter() - started
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide a shared corpus's cache from other users
    try:
        started = time.perf_counter()
        try:
            stats = _encode_splits(tokenizer, corpus_dir, tmp, np.dtype(np.uint16), progress)
        except _NBytesOverflow:  # rare: start again with room for it
            stats = _encode_splits(tokenizer, corpus_dir, tmp, np.dtype(np.uint32), progress)
        encode_seconds = time.perf_counter() - started
        tokens = stats["train_tokens"] + stats["val_tokens"]
        meta = {
            "format": FORMAT,
            **want,
            "dtype": ids_dtype(vocab_size).name,
            **stats,
            "bytes_per_token": (stats["train_bytes"] + stats["val_bytes"]) / tokens
            if tokens
            else 0.0,
            # Share of validation targets that are <unk> (markers included in the count).
            "unk_rate": stats["unk_val"] / stats["val_tokens"] if stats["val_tokens"] else 0.0,
            "special_ids": dict(tokenizer.special_ids),
            "pad_id": tokenizer.pad_id,
            "unk_id": tokenizer.unk_id,
            "encode_seconds": round(encode_seconds, 4),
            "tokenizer_seconds": round(tokenizer_seconds, 4),
            "files": dict(FILES),
        }
        tokenizer.save(tmp / FILES["tokenizer"])
        # Read back from disk by the same function that checks them on every open.
        meta["checksums"] = {key: _scan(tmp / name)[0] for key, name in FILES.items()}
        # unigram_counts last: it is long, and the rest of meta.json stays readable above it.
        meta["unigram_counts"] = meta.pop("unigram_counts")
        write_json_atomic(tmp / META_NAME, meta)
        _publish(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _encode_splits(
    tokenizer: Tokenizer,
    corpus_dir: Path,
    out: Path,
    nb_dtype: np.dtype,
    progress: Progress | None,
) -> dict[str, Any]:
    """Stream train.txt and val.txt through the tokenizer into ``out``; counts and sizes."""
    dtype = ids_dtype(tokenizer.vocab_size)
    sources = {split: corpus_dir / f"{split}.txt" for split in ("train", "val")}
    total = sum(src.stat().st_size for src in sources.values())
    done = 0
    stats: dict[str, Any] = {"nbytes_dtype": nb_dtype.name}
    unigram = np.zeros(tokenizer.vocab_size, dtype=np.int64)
    for split, src in sources.items():
        n_tokens = n_bytes = n_unk = unk_bytes = 0
        ids_file, nb_file = out / FILES[split], out / FILES[f"{split}_nbytes"]
        with open(ids_file, "wb") as f_ids, open(nb_file, "wb") as f_nb:
            for chunk, read in iter_marked_chunks(src):
                ids, nbytes = tokenizer.encode_marked(chunk)
                if len(ids) and int(ids.max()) >= tokenizer.vocab_size:  # pragma: no cover
                    raise SweepsError(
                        f"{src}: the {tokenizer.kind} tokenizer made an id out of "
                        "range; this is a bug, please report it"
                    )
                if nb_dtype == np.uint16 and len(nbytes) and int(nbytes.max()) > _UINT16_MAX:
                    raise _NBytesOverflow
                ids.astype(dtype).tofile(f_ids)
                nbytes.astype(nb_dtype).tofile(f_nb)
                n_tokens += len(ids)
                n_bytes += int(nbytes.sum(dtype=np.int64))
                if tokenizer.unk_id is not None:
                    is_unk = ids == tokenizer.unk_id
                    n_unk += int(np.count_nonzero(is_unk))
                    unk_bytes += int(nbytes[is_unk].sum(dtype=np.int64))
                if split == "train":
                    unigram += np.bincount(ids, minlength=tokenizer.vocab_size)
                done += read
                if progress is not None:
                    progress(done, total)
        stats[f"{split}_tokens"], stats[f"{split}_bytes"] = n_tokens, n_bytes
        stats[f"unk_{split}"] = n_unk
        stats[f"unk_bytes_{split}"] = unk_bytes  # the text the <unk> tokens stand for
    stats["unigram_counts"] = unigram.tolist()
    return stats


def _publish(tmp: Path, path: Path) -> None:
    """Rename the finished ``tmp`` dir to ``path``, moving a stale one aside first.

    A directory cannot be renamed over a non-empty one, so a stale cache goes to a temporary
    name first; a reader that looks in between finds nothing and waits on the lock.
    """
    old = None
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
        os.replace(path, old / "stale")
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # open memmaps of it stay valid until closed
