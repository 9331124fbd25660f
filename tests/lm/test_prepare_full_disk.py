"""``sweeps prepare`` on a full disk (issue 24, item 6): an OSError traceback (synthetic), or a
message blaming the input ("cannot read the file (No space left on device); check its
permissions") when the write inside the read loop failed. Now one line naming the output, exit
2, and nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.shared import small_tmpfs
from tests.sweeps.cli import assert_user_error


@pytest.fixture()
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 100 KiB tmpfs (root only: skipped where mount is not allowed)."""
    with small_tmpfs(tmp_path / "small", "100k") as mount:
        yield mount


def _prepare(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sweeps", "prepare", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("source", ["text", "posts", "synthetic"])
def test_a_full_disk_is_the_outputs_fault_in_one_line(
    source: str, full_disk: Path, tmp_path: Path
) -> None:
    out = full_disk / "corpus"
    if source == "text":
        for i in range(8):
            (tmp_path / f"f{i}.txt").write_text("hello world " * 20_000, encoding="utf-8")
        proc = _prepare(
            str(tmp_path / "*.txt"), "--format", "text", "--out", str(out), cwd=tmp_path
        )
    elif source == "posts":
        from lm.synthetic import write_synthetic_posts

        write_synthetic_posts(tmp_path / "Posts.xml", size_bytes=1_000_000, seed=0)
        proc = _prepare(str(tmp_path / "Posts.xml"), "--out", str(out), cwd=tmp_path)
    else:
        proc = _prepare("--synthetic", "--size", "1MB", "--out", str(out), cwd=tmp_path)
    assert_user_error(proc, f"cannot write the corpus to {out}", "No space left on device")
    assert "cannot read" not in proc.stderr
    assert list(full_disk.iterdir()) == []  # no staging dir left behind
