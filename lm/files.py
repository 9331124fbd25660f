"""Small file utilities shared by the lm stages and the CLI: atomic writes (JSON for the lm
stages, a user's ``--out`` file for the CLI) and an exclusive lock (the token cache's, the
tokenizers', the claims of a study on SQLite)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from lm.errors import SweepsError
from lm.host import pid_alive

#: What ``write_output`` calls each kind of file it will not replace.
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def write_json_atomic(path: Path, data: Any, *, indent: int | None = None) -> None:
    """Write JSON to a temporary name beside ``path``, then rename: readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(
        data, ensure_ascii=False, indent=indent, separators=(",", ": ") if indent else (",", ":")
    )
    # 0644: a private 0600 file would hide it from other users of the corpus.
    _replace_with(path, lambda f: f.write(text.encode("utf-8")), mode=0o644)


def output_target(path: Path, what: str = "--out") -> Path:
    """The file that writing the user-named output ``path`` replaces, or a one-line error.

    A regular file is replaced; a missing one is created (with its directories). A symlink is
    written through on purpose: its target is replaced and the link stays, so ``report.html ->
    /srv/www/study.html`` keeps working; a link into a missing directory is refused rather than
    creating directories where a link points. Anything else (a directory, a FIFO, a device node
    such as ``/dev/null``, a socket) is refused: renaming over it would destroy it (run as root,
    ``--out /dev/null`` would leave the system without its /dev/null).
    """
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if target.is_symlink():
        raise SweepsError(f"{what} {path} is a symlink that loops; remove it or give another path")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        if target is not path and not target.parent.is_dir():
            raise SweepsError(
                f"{what} {path} is a symlink to {target}, whose directory "
                f"{target.parent} does not exist; create it or give another "
                "path"
            ) from None
        return target
    except OSError as exc:
        raise SweepsError(f"cannot use {what} {path}: {_reason(exc)}; give another path") from None
    for is_kind, kind in _NOT_REGULAR:
        if is_kind(mode):
            shown = path if target is path else f"{path} (a symlink to {target})"
            raise SweepsError(
                f"{what} {shown} is {kind}, not a regular file; give the path of "
                "a new or a regular file, which is replaced"
            )
    return target


def write_output(path: Path, write: Callable[[IO[bytes]], object], *, what: str = "--out") -> Path:
    """Write a user-named output file through ``write`` (given a binary file), atomically.

    Where it writes is ``output_target``'s rule (a symlink is written through, a directory,
    FIFO or device node refused); the new file replaces the old by a rename, keeping the old
    one's permissions. A failed write (disk full, read-only or quota-bound file system, no
    permission, ...) is a one-line ``SweepsError`` naming the path and the OS reason, and leaves
    no temporary file behind. Returns the file written.
    """
    target = output_target(path, what)
    try:
        old = os.stat(target).st_mode if target.exists() else None
        target.parent.mkdir(parents=True, exist_ok=True)
        _replace_with(
            target,
            write,
            mode=None if old is None else stat.S_IMODE(old),
            recheck=lambda: output_target(path, what),
        )
    except OSError as exc:
        raise SweepsError(
            f"cannot write {what} {path}: {_reason(exc)}; free some space, make "
            "the directory writable or give another path"
        ) from None
    return target


def _replace_with(
    path: Path,
    write: Callable[[IO[bytes]], object],
    *,
    mode: int | None,
    recheck: Callable[[], object] | None = None,
) -> None:
    """``write`` a new temporary file beside ``path`` (same file system: the rename is atomic),
    sync it, then rename it over ``path``; on any failure the temporary file is removed.
    ``mode`` None: the process's default (0666 less the umask). ``recheck`` runs just before the
    rename, to narrow the window in which something else may have appeared at ``path``."""
    _remove_orphans(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if recheck is not None:
            recheck()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _remove_orphans(path: Path) -> None:
    """Remove the temporary files of writes to ``path`` whose writer is gone (a ``kill -9`` mid
    write left a 4.7 MB ``.NAME.html.XXXX.tmp`` that nothing removed). The writer's pid is in
    the name; one still running, or any pid alive here, keeps its file (never a race with a
    live writer on this host)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)-[0-9a-f]{{8}}\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or pid_alive(int(match.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path.parent / name)


def _reason(exc: OSError) -> str:
    """The OS's words for a failed file operation, one line ("No space left on device")."""
    return exc.strerror or (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def file_lock(path: Path, *, best_effort: bool = False) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing, with its directories) for
    the body; the kernel frees it when the holder exits, however it exits. Yields whether the
    lock is held: with ``best_effort`` a lock file that cannot be created (a directory that
    refuses new files) runs the body unlocked, for a caller with a fallback
    (``sweeps.claims``); else that is the ``OSError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        if not best_effort:
            raise
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock
