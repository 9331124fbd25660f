"""A write killed midway (issue 24, item 12): ``kill -9`` during a report write left a 4.7 MB
``.NAME.html.XXXX.tmp`` that nothing removed. The temporary name now carries the writer's pid,
and the next write to the same file removes the temporaries of writers that are gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lm.files import file_lock, write_output


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    orphan = tmp_path / f".r.html.{_dead_pid()}-0123abcd.tmp"
    orphan.write_bytes(b"x" * 1000)
    live = tmp_path / f".r.html.{os.getpid()}-89abcdef.tmp"  # a writer still at work
    live.write_bytes(b"y")
    other = tmp_path / f".other.html.{_dead_pid()}-0123abcd.tmp"  # another file's: not ours
    other.write_bytes(b"z")
    write_output(out, lambda f: f.write(b"<html>"))
    assert out.read_bytes() == b"<html>"
    assert not orphan.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name, other.name])


def test_a_write_killed_by_sigkill_leaves_a_file_the_next_write_removes(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    code = (
        "import os, signal, sys; from pathlib import Path; from lm.files import write_output\n"
        "def killed(f):\n"
        "    f.write(b'x' * 100000); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "write_output(Path(sys.argv[1]), killed)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=Path(__file__).parents[2])
    assert proc.returncode == -9
    assert len(list(tmp_path.glob(".r.html.*.tmp"))) == 1  # what the kill left
    write_output(out, lambda f: f.write(b"<html>"))
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_a_zombie_writers_temporary_file_is_removed(tmp_path: Path) -> None:
    # lm.host.pid_alive, the one answer the liveness checks share: a finished child its parent
    # has not reaped yet is gone, not a writer at work.
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while not _is_zombie(proc.pid):
            time.sleep(0.01)
        orphan = tmp_path / f".r.html.{proc.pid}-0123abcd.tmp"
        orphan.write_bytes(b"x")
        write_output(tmp_path / "r.html", lambda f: f.write(b"<html>"))
        assert not orphan.exists()
    finally:
        proc.wait()


def _is_zombie(pid: int) -> bool:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2] == "Z"


def test_file_lock_holds_or_says_it_cannot(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with file_lock(tmp_path / "sub" / ".lock") as held:
        assert held and (tmp_path / "sub" / ".lock").exists()
    # A lock file under a regular file cannot exist: best effort runs the body unlocked.
    with file_lock(blocker / ".lock", best_effort=True) as held:
        assert held is False
    with pytest.raises(OSError), file_lock(blocker / ".lock"):
        pass
