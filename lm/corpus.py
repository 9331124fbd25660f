"""Source text -> corpus dir (``train.txt``, ``val.txt``, ``manifest.json``).

Three sources: a Stack Exchange ``Posts.xml`` (streamed, see ``lm.posts_xml``), plain text files,
and the built-in synthetic Q&A corpus (``lm.synthetic``, written as a real ``Posts.xml`` and read
back through the same parser). Corpus files hold pairs serialized by ``lm.serialization`` (markers
as control characters), joined with the ``<D>`` mark; no leading or trailing mark.

The split is by question (by document for text), decided by a hash of its id, so it is stable
across runs and machines and no question's answers straddle train and validation.

Everything is written into a temporary dir beside ``out`` and renamed into place at the end: a
failure (bad input, Ctrl-C) leaves neither ``out`` nor the temporary dir behind.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import groupby
from pathlib import Path
from typing import Any, BinaryIO

from lm.errors import SweepsError
from lm.posts_xml import CHUNK_BYTES, Row, html_to_text, stream_posts
from lm.serialization import DOC, MARKER_CHARS, clean_text, serialize_pair
from lm.synthetic import write_synthetic_posts
from lm.units import size_in_bytes

__all__ = [
    "MANIFEST_NAME",
    "REQUIRED_MANIFEST_KEYS",
    "Progress",
    "is_validation",
    "load_manifest",
    "parse_size",
    "prepare_posts",
    "prepare_synthetic",
    "prepare_text",
    "write_synthetic_posts",
]

Progress = Callable[[int, int], None]

MANIFEST_NAME = "manifest.json"
TRAIN_NAME = "train.txt"
VAL_NAME = "val.txt"
MANIFEST_VERSION = 1
REQUIRED_MANIFEST_KEYS = (
    *("source", "format", "questions", "questions_answered", "answers", "pairs", "chars"),
    *("bytes", "train_bytes", "val_bytes", "sha256", "val_fraction", "train_pairs", "val_pairs"),
)
# Subdirs that later stages add to a corpus dir; kept across a re-prepare giving identical text.
_DERIVED_SUBDIRS = ("tokenizers", "cache")
_HASH_BUCKETS = 10_000

# --------------------------------------------------------------------------------------------
# Small public helpers


def parse_size(text: str) -> int:
    """``"5MB"`` -> 5_000_000, ``"512KiB"`` -> 524_288, ``"1000"`` -> 1000 (decimal units: KB,
    MB, GB; binary: KiB, MiB, GiB)."""
    size = size_in_bytes(str(text))
    if size is None:
        raise SweepsError(
            f"size {text!r}: expected a positive number of bytes with an optional unit "
            "(B, KB, MB, GB, KiB, MiB, GiB), e.g. 5MB"
        )
    return size


def is_validation(key: str, val_fraction: float) -> bool:
    """Whether the question (or document) ``key`` belongs to the validation split."""
    return _bucket(key) < val_fraction * _HASH_BUCKETS


def _bucket(key: str) -> int:
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % _HASH_BUCKETS


def _choose_validation(keys: list[str], val_fraction: float, what: str, where: str) -> set[str]:
    """The validation keys by hash; both splits non-empty (the boundary key moves if needed)."""
    if len(keys) < 2:
        raise SweepsError(
            f"{where}: the corpus is too small: {len(keys)} {what}, at least 2 are needed for a "
            "train/validation split; use a larger source"
        )
    buckets = {k: _bucket(k) for k in keys}
    val = {k for k in keys if buckets[k] < val_fraction * _HASH_BUCKETS}
    if not val:  # all in train: the key nearest the threshold goes to validation
        val.add(min(keys, key=lambda k: (buckets[k], k)))
    elif len(val) == len(keys):
        val.remove(max(keys, key=lambda k: (buckets[k], k)))
    return val


def _check_val_fraction(val_fraction: float) -> float:
    if (
        isinstance(val_fraction, bool)
        or not isinstance(val_fraction, (int, float))
        or not 0 < val_fraction < 1
    ):
        raise SweepsError(
            f"val_fraction must be a number > 0 and < 1, got {val_fraction!r}; e.g. 0.05"
        )
    return float(val_fraction)


def load_manifest(corpus_dir: Path) -> dict[str, Any]:
    """The manifest of a prepared corpus dir (checked: required keys, train and val files)."""
    corpus_dir = Path(corpus_dir)
    fix = f"prepare it with `sweeps prepare SOURCE --out {corpus_dir}`"
    if not corpus_dir.exists():
        raise SweepsError(f"corpus dir {corpus_dir} does not exist; {fix}")
    if not corpus_dir.is_dir():
        raise SweepsError(f"corpus dir {corpus_dir} is not a directory; {fix}")
    path = corpus_dir / MANIFEST_NAME
    if not path.is_file():
        raise SweepsError(f"{corpus_dir} is not a corpus dir (no {MANIFEST_NAME}); {fix}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SweepsError(f"{path}: unreadable manifest ({e}); {fix}") from None
    if not isinstance(manifest, dict):
        raise SweepsError(f"{path}: the manifest is not a JSON object; {fix}")
    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing:
        raise SweepsError(f"{path}: the manifest lacks {', '.join(missing)}; {fix}")
    for name in (TRAIN_NAME, VAL_NAME):
        if not (corpus_dir / name).is_file():
            raise SweepsError(f"{corpus_dir}: {name} is missing; {fix}")
    return manifest


# --------------------------------------------------------------------------------------------
# Output: staging dir, split writers, manifest


@contextmanager
def _staging(out: Path, inputs: list[Path], replace: bool) -> Iterator[Path]:
    """A temporary dir beside ``out``; renamed to ``out`` on success, removed on any failure.

    An existing corpus dir at ``out`` is replaced only with ``replace``; an empty dir always
    may be; any other dir never is (``replace`` must not delete a user's files).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SweepsError(f"--out {out} is a file; pass a directory path for the corpus")
    out_abs = Path(os.path.abspath(out))
    for source in inputs:
        if Path(os.path.abspath(source)).is_relative_to(out_abs):
            raise SweepsError(
                f"the input {source} is inside --out {out}, which is replaced; "
                "choose an --out outside the input"
            )
    if out.is_dir() and any(out.iterdir()):
        if not (out / MANIFEST_NAME).is_file():
            raise SweepsError(
                f"--out {out} exists and is not a corpus dir; choose a new --out or empty it"
            )
        if not replace:
            raise SweepsError(
                f"--out {out} already holds a corpus; pass --force to replace it "
                "or choose another --out"
            )
    created = []  # parents we make, removed again if we fail
    parent = out_abs.parent
    while not parent.exists():
        created.append(parent)
        parent = parent.parent
    try:
        out_abs.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepsError(f"--out {out}: cannot create its parent dir ({e.strerror})") from None
    tmp = _new_dir(out_abs.parent, f".{out_abs.name}.tmp-")
    try:
        yield tmp
        _replace_dir(tmp, out_abs)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        for d in created:  # innermost first
            try:
                d.rmdir()
            except OSError:
                break
        # Reading errors were told per input file already; an OSError here is a write into
        # the staging dir (a full disk) or its rename: the output's fault, never the input's.
        failed = exc.error if isinstance(exc, _WriteFailed) else exc
        if isinstance(failed, OSError):
            raise SweepsError(
                f"cannot write the corpus to {out} ({failed.strerror or failed}); "
                "free some space or give another --out"
            ) from None
        raise


class _WriteFailed(Exception):
    """A write of the corpus failed. Not an OSError, so that the handlers of a failed *read*
    of an input (which wrap the writes) do not blame the input file for a full disk."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _new_dir(parent: Path, prefix: str) -> Path:
    """A fresh uniquely named dir; made with ``mkdir`` (not ``mkdtemp``) so the finished corpus
    dir gets the umask's permissions rather than owner-only ones."""
    while True:
        path = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as e:
            raise SweepsError(f"cannot create a dir in {parent} ({e.strerror}); check it") from None
        return path


def _replace_dir(new: Path, out: Path) -> None:
    if not out.exists():
        new.rename(out)
        return
    if not (out / MANIFEST_NAME).is_file():  # an empty dir (checked at the start)
        out.rmdir()
        new.rename(out)
        return
    # A re-prepare: tokenizers and token caches stay valid if the corpus text is identical.
    try:
        old_sha = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8")).get("sha256")
    except (OSError, ValueError, AttributeError):
        old_sha = None
    new_sha = json.loads((new / MANIFEST_NAME).read_text(encoding="utf-8"))["sha256"]
    if old_sha == new_sha:
        for sub in _DERIVED_SUBDIRS:
            if (out / sub).is_dir():
                (out / sub).rename(new / sub)
    old = _new_dir(out.parent, f".{out.name}.old-")
    out.rename(old / "corpus")
    new.rename(out)
    shutil.rmtree(old, ignore_errors=True)


class _SplitWriter:
    """One split file: items joined with the ``<D>`` mark, counted as they are written."""

    def __init__(self, path: Path, digest: Any | None = None) -> None:
        self.path = path
        self.file: BinaryIO = path.open("wb")
        self.digest = digest
        self.items = 0
        self.units = 0  # questions or documents
        self.chars = 0
        self.bytes = 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        try:
            self.file.write(data)
        except OSError as exc:
            raise _WriteFailed(exc) from None
        if self.digest is not None:
            self.digest.update(data)
        self.chars += len(text)
        self.bytes += len(data)

    def start_item(self) -> None:
        if self.items:
            self.write(MARKER_CHARS[DOC])
        self.items += 1

    def close(self) -> None:
        try:
            self.file.close()  # flushes the buffer: where a full disk often shows
        except OSError as exc:
            raise _WriteFailed(exc) from None


class _Splits:
    def __init__(self, staging: Path) -> None:
        self.digest = hashlib.sha256()
        self.train = _SplitWriter(staging / TRAIN_NAME, self.digest)
        self.val = _SplitWriter(staging / VAL_NAME)

    def finish(self) -> dict[str, Any]:
        self.train.close()
        self.val.close()
        # The corpus identity is sha256(train bytes + val bytes): train was hashed as written.
        with self.val.path.open("rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                self.digest.update(chunk)
        return {
            "chars": self.train.chars + self.val.chars,
            "bytes": self.train.bytes + self.val.bytes,
            "train_chars": self.train.chars,
            "val_chars": self.val.chars,
            "train_bytes": self.train.bytes,
            "val_bytes": self.val.bytes,
            "sha256": self.digest.hexdigest(),
        }


def _write_manifest(staging: Path, manifest: dict[str, Any]) -> None:
    manifest["files"] = {"train": TRAIN_NAME, "val": VAL_NAME}
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    (staging / MANIFEST_NAME).write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Stack Exchange Posts.xml


def _check_input_file(source: Path, what: str) -> Path:
    source = Path(source).expanduser()
    if not source.exists():
        raise SweepsError(f"{source}: no such file; pass the path of {what}")
    if source.is_dir():
        inside = source / "Posts.xml"
        hint = f"pass {inside}" if inside.is_file() else f"pass the path of {what} inside it"
        raise SweepsError(f"{source} is a directory, expected a file; {hint}")
    return source


def prepare_posts(
    source: Path,
    out: Path,
    *,
    val_fraction: float = 0.05,
    progress: Progress | None = None,
    replace: bool = False,
) -> dict[str, Any]:
    """Stack Exchange ``Posts.xml`` -> corpus dir ``out``; returns the manifest.

    ``replace``: replace a corpus already at ``out`` (its token caches are kept if the new corpus
    text is identical).
    """
    val_fraction = _check_val_fraction(val_fraction)
    source = _check_input_file(source, "a Stack Exchange Posts.xml")
    started = time.perf_counter()
    with _staging(out, [source], replace) as staging:
        manifest = _build_posts(source, staging, val_fraction, progress)
        manifest = {
            "version": MANIFEST_VERSION,
            "source": str(Path(os.path.abspath(source))),
            "format": "posts",
            **manifest,
            "prepare_seconds": round(time.perf_counter() - started, 3),
        }
        _write_manifest(staging, manifest)
    return manifest


def _build_posts(
    xml: Path, staging: Path, val_fraction: float, progress: Progress | None
) -> dict[str, Any]:
    """Parse ``xml`` into ``staging``'s split files; the manifest's counts and sizes.

    Post texts go to a spill file as they are parsed (only offsets stay in memory), so memory is
    bounded by the number of posts, not their size; pairs are then written in (question id,
    answer id) order whatever the order of the rows in the file.
    """
    questions: dict[int, tuple[int, int]] = {}  # id -> (offset, length) in the spill file
    answers: list[tuple[int, int, int, int]] = []  # (parent id, id, offset, length)
    other_posts = 0
    spill_path = staging / "posts.spill"
    with spill_path.open("w+b") as spill:
        offset = 0

        def keep(text: str) -> tuple[int, int]:
            nonlocal offset
            data = text.encode("utf-8")
            spill.write(data)
            offset += len(data)
            return offset - len(data), len(data)

        def on_row(row: Row) -> None:
            nonlocal other_posts
            if row.post_type == 1:
                body = html_to_text(row.body)
                title = row.title.strip()
                questions[row.post_id] = keep(
                    f"{title}\n{body}" if title and body else title or body
                )
            elif row.post_type == 2 and row.parent_id is not None:
                answers.append((row.parent_id, row.post_id, *keep(html_to_text(row.body))))
            else:
                other_posts += 1

        stream_posts(xml, on_row, progress=progress)
        spill.flush()
        fd = spill.fileno()

        def read(span: tuple[int, int]) -> str:
            return os.pread(fd, span[1], span[0]).decode("utf-8")

        answers.sort()
        answered = sorted({a[0] for a in answers if a[0] in questions})
        pairs = sum(1 for a in answers if a[0] in questions)
        if not pairs:
            raise SweepsError(
                f"{xml}: no question/answer pairs ({len(questions)} questions, "
                f"{len(answers)} answers with a known question: 0); pass a Posts.xml whose "
                "questions have answers"
            )
        val_ids = _choose_validation(
            [str(q) for q in answered], val_fraction, "answered question(s)", str(xml)
        )
        splits = _Splits(staging)
        for parent, group in groupby(answers, key=lambda a: a[0]):
            if parent not in questions:
                continue
            question = read(questions[parent])
            writer = splits.val if str(parent) in val_ids else splits.train
            writer.units += 1
            for _, _, start, length in group:
                writer.start_item()
                writer.write(serialize_pair(question, read((start, length))))
    spill_path.unlink()
    sizes = splits.finish()
    return {
        "questions": len(questions),
        "questions_answered": len(answered),
        "answers": len(answers),
        "pairs": pairs,
        "orphan_answers": len(answers) - pairs,
        "other_posts": other_posts,
        "documents": pairs,
        "train_questions": splits.train.units,
        "val_questions": splits.val.units,
        "train_pairs": splits.train.items,
        "val_pairs": splits.val.items,
        **sizes,
        "val_fraction": val_fraction,
        "input_bytes": xml.stat().st_size,
    }


# --------------------------------------------------------------------------------------------
# Synthetic


def prepare_synthetic(
    out: Path,
    *,
    size_bytes: int,
    seed: int,
    val_fraction: float = 0.05,
    progress: Progress | None = None,
    replace: bool = False,
) -> dict[str, Any]:
    """The built-in synthetic Q&A corpus (``size_bytes`` of ``Posts.xml``) -> corpus dir ``out``.

    The XML is generated inside the staging dir, parsed like a real dump, then deleted. Progress
    counts generation as the first half of the work and parsing as the second.
    """
    val_fraction = _check_val_fraction(val_fraction)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SweepsError(f"seed must be an integer, got {seed!r}")
    started = time.perf_counter()
    with _staging(out, [], replace) as staging:
        xml = staging / "synthetic.Posts.xml"
        total = 2 * size_bytes

        def generated(done: int, _: int) -> None:
            if progress is not None:
                progress(min(done, size_bytes), total)

        def parsed(done: int, of: int) -> None:
            if progress is not None:
                progress(size_bytes + done * size_bytes // max(of, 1), total)

        write_synthetic_posts(xml, size_bytes=size_bytes, seed=seed, progress=generated)
        manifest = _build_posts(xml, staging, val_fraction, parsed)
        xml.unlink()
        manifest = {
            "version": MANIFEST_VERSION,
            "source": f"synthetic:size={size_bytes},seed={seed}",
            "format": "synthetic",
            "size_bytes": size_bytes,
            "seed": seed,
            **manifest,
            "prepare_seconds": round(time.perf_counter() - started, 3),
        }
        _write_manifest(staging, manifest)
    return manifest


# --------------------------------------------------------------------------------------------
# Plain text


def prepare(
    out: Path,
    *,
    sources: Sequence[str] = (),
    format: str | None = None,
    synthetic_size: int | None = None,
    seed: int = 0,
    val_fraction: float = 0.05,
    progress: Progress | None = None,
    replace: bool = False,
) -> dict[str, Any]:
    """A corpus dir ``out`` from whichever source is given: the synthetic corpus
    (``synthetic_size`` bytes), one ``Posts.xml`` (``format`` posts, the default), or text files
    (``format`` text). Returns the manifest."""
    if synthetic_size is not None:
        if sources:
            raise SweepsError("give either --synthetic or source files, not both")
        return prepare_synthetic(
            out,
            size_bytes=synthetic_size,
            seed=seed,
            val_fraction=val_fraction,
            progress=progress,
            replace=replace,
        )
    if not sources:
        raise SweepsError("no source given; pass a Posts.xml path, text files, or --synthetic")
    if format in (None, "posts"):
        if len(sources) != 1:
            raise SweepsError(
                f"--format posts takes one Posts.xml, got {len(sources)} paths; "
                "use --format text for several text files"
            )
        return prepare_posts(
            Path(sources[0]), out, val_fraction=val_fraction, progress=progress, replace=replace
        )
    if format == "text":
        return prepare_text(
            list(sources), out, val_fraction=val_fraction, progress=progress, replace=replace
        )
    raise SweepsError(f"unknown --format {format!r}; use posts or text")


def _expand_sources(sources: list[str]) -> tuple[list[Path], int]:
    """Paths and glob patterns -> files, each real file once; a pattern matching nothing is an
    error. Also returns how many names were dropped as another name of a file already listed.

    A file reached under several names (a symlink to it, a hard link, a path through a linked
    dir or a symlink loop such as ``ln -s . loop``) is one document: read twice, it would count
    twice and could land in both splits, since the split hashes the name. It keeps the name with
    the fewest symlinks on its path (its own name, whenever that is matched too, so the links
    change nothing in the split), the first of those in the order given (hard links: the first,
    as no name of the file is more its own than another).
    """
    if not sources:
        raise SweepsError("no text sources given; pass files or glob patterns such as notes/*.txt")
    names: dict[str, Path] = {}  # one entry per path as written, in order
    for source in sources:
        pattern = os.path.expanduser(str(source))
        if any(c in pattern for c in "*?["):
            matches = [Path(m) for m in sorted(_glob(pattern))]
            matches = [m for m in matches if m.is_file()]
            if not matches:
                raise SweepsError(f"{source}: the pattern matches no file; check the path")
        else:
            path = Path(pattern)
            if not path.exists():
                raise SweepsError(f"{source}: no such file; pass existing text files")
            if path.is_dir():
                raise SweepsError(
                    f"{source} is a directory, expected a file; pass its files, "
                    f"e.g. '{path / '*.txt'}'"
                )
            matches = [path]
        for m in matches:
            names.setdefault(os.path.abspath(m), m)
    best: dict[tuple[int, int], tuple[tuple[int, int], Path]] = {}  # file id -> (rank, name)
    links = _SymlinkCounter()
    for order, name in enumerate(names.values()):
        st = name.stat()
        rank = (links.on_path(name), order)
        key = (st.st_dev, st.st_ino)
        if key not in best or rank < best[key][0]:
            best[key] = (rank, name)
    files = [name for _, name in sorted(best.values(), key=lambda v: v[0][1])]  # given order
    return files, len(names) - len(files)


class _SymlinkCounter:
    """How many symlinks lie on a path (the file and every dir above it); dirs memoized."""

    def __init__(self) -> None:
        self._dirs: dict[str, int] = {}

    def on_path(self, path: Path) -> int:
        absolute = os.path.abspath(path)
        return int(os.path.islink(absolute)) + self._dir(os.path.dirname(absolute))

    def _dir(self, d: str) -> int:
        if d not in self._dirs:
            parent = os.path.dirname(d)
            above = self._dir(parent) if parent != d else 0
            self._dirs[d] = int(os.path.islink(d)) + above
        return self._dirs[d]


def _glob(pattern: str) -> list[str]:
    """``glob.glob(pattern, recursive=True)``, except that a ``**`` walks each real dir once.

    glob's own ``**`` follows symlinked dirs with no memory of where it has been: ``ln -s .
    loop`` lists every file 41 times (until the kernel's ELOOP), and two such links make it run
    for ever (2**40 paths). Patterns without ``**`` go to glob as they are: their depth bounds
    them.
    """
    parts = pattern.split(os.sep)
    if "**" not in parts:
        return glob.glob(pattern)
    i = parts.index("**")
    head, tail = os.sep.join(parts[:i]), parts[i + 1 :] or ["*"]
    if i == 1 and head == "":
        head = os.sep  # the pattern starts with /**
    if any(c in head for c in "*?["):
        tops = [t for t in glob.glob(head) if os.path.isdir(t)]
    else:
        tops = [head] if head == "" or os.path.isdir(head) else []
    seen: set[tuple[int, int]] = set()
    found = []
    for top in tops:
        for d in _real_dirs(top, seen):
            found += _glob(os.path.join(glob.escape(d), *tail))
    return found


def _real_dirs(top: str, seen: set[tuple[int, int]]) -> list[str]:
    """``top`` and the dirs below it that ``**`` matches (hidden ones skipped, as glob does), each
    real dir once (``seen`` holds their ids): dirs reached without a symlink first, so a dir is
    named by its own path when it has one, and a loop ends where it starts. ``""`` is the cwd.
    """
    linked: list[str]
    plain, linked, found = [top], [], []
    while plain or linked:
        d = plain.pop() if plain else linked.pop(0)
        try:
            st = os.stat(d or os.curdir)
            entries = sorted(os.scandir(d or os.curdir), key=lambda e: e.name)
        except OSError:  # vanished, unreadable, or a dangling link
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        found.append(d)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir():  # follows a symlink
                    path = os.path.join(d, entry.name)
                    (linked if entry.is_symlink() else plain).append(path)
            except OSError:
                continue
    return found


def _relative_names(files: list[Path]) -> list[str]:
    """Each file's path relative to the files' common dir: the split key, stable across cwds."""
    absolute = [os.path.abspath(f) for f in files]
    common = os.path.commonpath([os.path.dirname(a) for a in absolute])
    return [Path(os.path.relpath(a, common)).as_posix() for a in absolute]


def prepare_text(
    sources: list[str],
    out: Path,
    *,
    val_fraction: float = 0.05,
    progress: Progress | None = None,
    replace: bool = False,
) -> dict[str, Any]:
    """Plain UTF-8 text files (paths or globs) -> corpus dir ``out``: one document per file.

    Documents are joined with the ``<D>`` mark, ordered by relative path; reserved control
    characters are removed, line ends normalized to ``\\n``, and leading whitespace dropped; a
    file with no text is skipped, and so is a further name of a file already read (a symlink or
    a hard link to it; see ``_expand_sources``). Split by a hash of the relative path.
    """
    val_fraction = _check_val_fraction(val_fraction)
    if isinstance(sources, (str, os.PathLike)):  # one path, not a sequence of characters
        sources = [str(sources)]
    found, duplicates = _expand_sources(list(sources))
    files = [f for f in found if f.stat().st_size > 0]
    names = _relative_names(files) if files else []
    documents = sorted(zip(names, files, strict=True))
    val_names = _choose_validation(
        names, val_fraction, "non-empty text file(s)", " ".join(map(str, sources))
    )
    total = sum(f.stat().st_size for f in files)
    started = time.perf_counter()
    with _staging(out, files, replace) as staging:
        splits = _Splits(staging)
        done = 0
        for name, path in documents:
            writer = splits.val if name in val_names else splits.train
            done += _copy_document(
                path,
                writer,
                # mypy cannot infer a lambda with a default; the default binds this document's base
                lambda n, base=done: _report(progress, base + n, total),  # type: ignore[misc]
            )
        sizes = splits.finish()
        empty = [s for s, w in (("train", splits.train), ("validation", splits.val)) if not w.items]
        if empty:
            raise SweepsError(
                f"the corpus is too small: the {empty[0]} split has no text "
                f"({splits.train.items + splits.val.items} non-empty files); add more text files"
            )
        n_docs = splits.train.items + splits.val.items
        manifest = {
            "version": MANIFEST_VERSION,
            "source": " ".join(str(s) for s in sources),
            "format": "text",
            "questions": 0,
            "questions_answered": 0,
            "answers": 0,
            "pairs": 0,
            "documents": n_docs,
            "files_skipped_empty": len(found) - n_docs,
            # names of a file already read: a symlink, a hard link, a path through a symlink loop
            "files_skipped_duplicate": duplicates,
            "train_documents": splits.train.items,
            "val_documents": splits.val.items,
            "train_pairs": 0,
            "val_pairs": 0,
            **sizes,
            "val_fraction": val_fraction,
            "input_bytes": total,
            "prepare_seconds": round(time.perf_counter() - started, 3),
        }
        _write_manifest(staging, manifest)
    return manifest


def _report(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def _copy_document(path: Path, writer: _SplitWriter, progress: Callable[[int], None]) -> int:
    """Stream one text file into ``writer`` as one document; returns the bytes read."""
    started = False
    try:
        with path.open("rb") as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline=None)
            while chunk := text.read(CHUNK_BYTES):
                chunk = clean_text(chunk)
                if not started:
                    chunk = chunk.lstrip()
                    if not chunk:
                        continue
                    writer.start_item()
                    started = True
                writer.write(chunk)
                progress(raw.tell())
            return raw.tell()
    except UnicodeDecodeError as e:
        raise SweepsError(
            f"{path}: not UTF-8 text ({e.reason}); convert it to UTF-8 or leave it out"
        ) from None
    except OSError as e:
        raise SweepsError(f"{path}: cannot read the file ({e.strerror})") from None
