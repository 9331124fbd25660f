"""Text sources reached under several names (symlinks, hard links, a symlink loop): each real
file is one document, read once, split as it would be without the extra names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from lm.corpus import prepare_text
from lm.serialization import MARKER_CHARS

REPO = Path(__file__).resolve().parents[2]
DOC = MARKER_CHARS["<D>"]


def _notes(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    for i in range(12):
        (root / f"n{i:02d}.txt").write_text(f"note {i}\n", encoding="utf-8")
    (root / "sub" / "deep.txt").write_text("deep note\n", encoding="utf-8")
    return root


def _documents(corpus: Path, split: str) -> list[str]:
    return (corpus / f"{split}.txt").read_text(encoding="utf-8").split(DOC)


def test_links_and_a_loop_read_each_file_once_and_split_as_without_them(tmp_path: Path) -> None:
    plain = _notes(tmp_path / "plain")
    linked = tmp_path / "linked"
    shutil.copytree(plain, linked)
    os.symlink("n03.txt", linked / "alias.txt")
    os.symlink("n05.txt", linked / "0first.txt")  # sorts before the file it names
    os.symlink(".", linked / "loop")  # loop/n00.txt, loop/loop/n00.txt, ... up to ELOOP
    os.symlink("sub", linked / "subalias")
    want = prepare_text(str(plain / "**" / "*.txt"), tmp_path / "want", val_fraction=0.3)
    got = prepare_text(str(linked / "**" / "*.txt"), tmp_path / "got", val_fraction=0.3)
    assert got["documents"] == want["documents"] == 13
    # alias.txt, 0first.txt; the loop and subalias are never walked (their dirs are seen already)
    assert got["files_skipped_duplicate"] == 2 and want["files_skipped_duplicate"] == 0
    for split in ("train", "val"):
        assert _documents(tmp_path / "got", split) == _documents(tmp_path / "want", split)
        assert got[f"{split}_documents"] == want[f"{split}_documents"] >= 1
    assert got["sha256"] == want["sha256"]


def test_a_hard_link_is_read_once_under_the_first_name(tmp_path: Path) -> None:
    notes = _notes(tmp_path / "notes")
    os.link(notes / "n07.txt", notes / "hard.txt")  # two names, neither more real than the other
    m = prepare_text(str(notes / "**" / "*.txt"), tmp_path / "out")
    assert m["documents"] == 13 and m["files_skipped_duplicate"] == 1
    docs = _documents(tmp_path / "out", "train") + _documents(tmp_path / "out", "val")
    assert docs.count("note 7\n") == 1


def test_a_file_named_twice_on_the_command_line_is_read_once(tmp_path: Path) -> None:
    notes = _notes(tmp_path / "notes")
    os.symlink(notes / "n01.txt", tmp_path / "elsewhere.txt")
    m = prepare_text([str(notes / "*.txt"), str(tmp_path / "elsewhere.txt")], tmp_path / "out")
    assert m["documents"] == 12 and m["files_skipped_duplicate"] == 1
    docs = _documents(tmp_path / "out", "train") + _documents(tmp_path / "out", "val")
    assert docs.count("note 1\n") == 1


CHILD = r"""
import sys
from lm.corpus import prepare_text
m = prepare_text(sys.argv[1], sys.argv[2], val_fraction=0.5)
print(m["documents"], m["files_skipped_duplicate"])
"""


def test_two_symlink_loops_terminate(tmp_path: Path) -> None:
    # glob's own ``**`` would follow l1/l2/l1/... : 2**40 paths, it never ends
    notes = tmp_path / "notes"
    notes.mkdir()
    for name in ("a", "b", "c"):
        (notes / f"{name}.txt").write_text(f"text {name}\n", encoding="utf-8")
    os.symlink(".", notes / "l1")
    os.symlink(".", notes / "l2")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(notes / "**" / "*.txt"), str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "0"]  # the loops are not walked: no name to drop
