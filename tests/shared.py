"""Files the whole test run shares: built once, under a lock, in a directory every pytest-xdist
worker of the run sees (the run's base temporary directory), so two workers never build the
same corpus twice nor read one half written.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lm.corpus import prepare_synthetic


def run_dir(factory: pytest.TempPathFactory) -> Path:
    """The base temporary directory of the whole run: a worker's own base is a subdirectory of
    it (``popen-gw0``, ...) under pytest-xdist; without xdist it is the session's base."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(path: Path, build: Callable[[Path], None], done: str) -> Path:
    """``path``, built by ``build(path)`` unless ``path / done`` is there already; one process
    builds at a time (an ``flock`` beside it), the others wait and reuse what it built."""
    if not (path / done).is_file():
        with open(path.parent / f".{path.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (path / done).is_file():
                build(path)
    return path


def shared_corpus(factory: pytest.TempPathFactory) -> Path:
    """The 300 KB synthetic corpus (seed 0), prepared once per test run and shared by every
    module and worker (its token caches too: ``lm.tokens`` builds them under its own lock).
    Tests that change a corpus copy it first."""
    return built_once(
        run_dir(factory) / "sweeps-corpus-300KB",
        lambda out: prepare_synthetic(out, size_bytes=300_000, seed=0),
        "manifest.json",
    )


@contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"100k"``) mounted at ``where`` (created), for full-disk tests;
    root only: the test is skipped where mount is not allowed. Unmounted lazily at the end, so
    a process still holding a file there does not fail the test's teardown."""
    where.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()[:200]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
