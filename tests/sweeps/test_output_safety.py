"""What the CLI writes is safe for the file system and the terminal.

- ``--out`` of ``sweeps report`` and ``sweeps export`` never renames over a device node, a FIFO
  or a directory; a symlink is written through to its target, the link left in place;
- a write that fails (here: past ``RLIMIT_FSIZE``, EFBIG, the same path as a full disk) is one
  line naming the path and the OS reason, and leaves no temporary file behind;
- control characters and rich markup in names and texts from a shared database reach the
  terminal escaped, as visible text.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from sweeps.cli.progress import Board, live_display
from sweeps.console import wide_console
from tests.sweeps import fake_study
from tests.sweeps.cli import assert_user_error, sweeps

EVIL = "\x1b]0;PWNED\x07\x9b2J"  # an OSC that retitles the terminal, then a C1 CSI
MARKUP = "[/x]"  # a closing tag rich would choke on, were it read as markup


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('output_safety') / 'study.db'}"
    fake_study.fabricate(url, "vocab", 6, seed=3)
    return url


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _write(command: str, db: str, out: Path) -> subprocess.CompletedProcess[str]:
    if command == "report":
        return sweeps("report", "vocab", "--storage", db, "--out", str(out))
    return sweeps("export", "vocab", "--storage", db, "--format", "csv", "--out", str(out))


# --- what is at the path ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["report", "export"])
def test_fifo_is_refused_and_left_a_fifo(db: str, tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert_user_error(_write(command, db, fifo), str(fifo), "FIFO", "regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("command", ["report", "export"])
def test_device_node_is_refused_and_left_a_device(db: str, tmp_path: Path, command: str) -> None:
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")
    assert_user_error(_write(command, db, null), str(null), "character device")
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    # A link to a device is the device: refused too, the link kept.
    link = tmp_path / "to-null"
    link.symlink_to(null)
    assert_user_error(_write(command, db, link), str(link), "character device")
    assert link.is_symlink() and stat.S_ISCHR(os.lstat(null).st_mode)
    assert _leftovers(tmp_path) == []


def test_directory_is_refused(db: str, tmp_path: Path) -> None:
    target = tmp_path / "dir"
    target.mkdir()
    assert_user_error(_write("export", db, target), str(target), "directory")
    assert target.is_dir() and list(target.iterdir()) == []


@pytest.mark.parametrize("command", ["report", "export"])
def test_symlink_to_a_file_is_written_through(db: str, tmp_path: Path, command: str) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.txt"
    target.write_text("PREVIOUS CONTENTS\n")
    target.chmod(0o640)
    link = tmp_path / "link"
    link.symlink_to(target)
    proc = _write(command, db, link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and link.resolve() == target
    text = target.read_text()
    assert "PREVIOUS CONTENTS" not in text
    assert text.startswith("<!DOCTYPE html>" if command == "report" else "number,")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file's mode is kept
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "real") == []


def test_dangling_symlink_into_an_existing_dir_creates_its_target(db: str, tmp_path: Path) -> None:
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "new.csv")
    proc = _write("export", db, link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and (tmp_path / "new.csv").read_text().startswith("number,")


@pytest.mark.parametrize("command", ["report", "export"])
def test_symlink_into_a_missing_dir_is_refused(db: str, tmp_path: Path, command: str) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "missing" / "out.txt")
    assert_user_error(
        _write(command, db, link), str(link), str(tmp_path / "missing"), "does not exist"
    )
    assert link.is_symlink() and not (tmp_path / "missing").exists()
    assert _leftovers(tmp_path) == []


# --- a write that fails -------------------------------------------------------------------------


LIMIT = 64 * 2**10  # above SQLite's 32 KiB shared-memory file (-shm), below what is written


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A study whose CSV and JSON exports are larger than ``LIMIT``."""
    url = f"sqlite:///{tmp_path_factory.mktemp('output_safety_big') / 'study.db'}"
    fake_study.fabricate(url, "vocab", 100, seed=4)
    return url


def _sweeps_with_file_size_limit(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sweeps ARGS`` in a child that may write no file past ``LIMIT`` bytes: a write
    beyond fails with EFBIG (SIGXFSZ ignored), as one on a full disk fails with ENOSPC. (Reading
    the database writes only SQLite's -shm file; Python's failed .pyc writes are silent.)"""

    def limit_writes() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit_writes,
    )


def test_report_that_cannot_be_written_is_one_line_and_leaves_no_temp(
    big_db: str, tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    proc = _sweeps_with_file_size_limit("report", "vocab", "--storage", big_db, "--out", str(out))
    assert_user_error(proc, str(out), "File too large")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_that_cannot_be_written_is_one_line_and_leaves_no_temp(
    big_db: str, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / f"t.{fmt}"
    proc = _sweeps_with_file_size_limit(
        "export", "vocab", "--storage", big_db, "--format", fmt, "--out", str(out)
    )
    assert_user_error(proc, str(out), "File too large")
    assert list(tmp_path.iterdir()) == []


# --- what reaches the terminal ------------------------------------------------------------------


@pytest.fixture(scope="module")
def evil_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A shared database written by someone else: control characters and markup in the study's
    name, a trial's reason and outcome, and a parameter's value."""
    url = f"sqlite:///{tmp_path_factory.mktemp('evil') / 'shared.db'}"
    name = f"s{EVIL}{MARKUP}"
    study = optuna.create_study(storage=url, study_name=name)
    trial = study.ask({"note": CategoricalDistribution([f"v{EVIL}{MARKUP}"])})
    trial.set_user_attr("reason", f"r{EVIL}{MARKUP}\nfake row")
    study.tell(trial, 1.5)
    trial = study.ask({"note": CategoricalDistribution([f"v{EVIL}{MARKUP}"])})
    trial.set_user_attr("outcome", f"o{EVIL}")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return url, name


def _raw_controls(stream: str) -> list[str]:
    return [c for c in stream if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0]


def _assert_escaped(proc: subprocess.CompletedProcess[str], *visible: str) -> None:
    assert proc.returncode == 0, proc.stderr
    assert _raw_controls(proc.stdout) == [] and _raw_controls(proc.stderr) == []
    for text in visible:
        assert text in proc.stdout, proc.stdout


def test_status_escapes_control_characters(evil_db: tuple[str, str]) -> None:
    url, _ = evil_db
    _assert_escaped(sweeps("status", "--storage", url), r"s\x1b]0;PWNED\x07\x9b2J[/x]")


def test_trials_escapes_control_characters(evil_db: tuple[str, str]) -> None:
    url, name = evil_db
    proc = sweeps("trials", name, "--storage", url)
    _assert_escaped(
        proc,
        r"s\x1b]0;PWNED\x07\x9b2J[/x]",
        r"v\x1b]0;PWNED\x07\x9b2J[/x]",
        r"\x9b2J[/x]\nfake",
        r"o\x1b]0;PWNED",
    )
    assert not any(line.startswith("fake row") for line in proc.stdout.splitlines())


def test_report_summary_escapes_control_characters(
    evil_db: tuple[str, str], tmp_path: Path
) -> None:
    url, name = evil_db
    proc = sweeps("report", name, "--storage", url, "--out", str(tmp_path / "r.html"))
    _assert_escaped(proc, r"s\x1b]0;PWNED\x07\x9b2J[/x]")


def test_run_progress_escapes_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    """What `sweeps run` shows: the live table of running trials, and the lines written when
    stderr is not a terminal (one per finished trial, with its reason)."""
    board = Board(optuna.create_study(), 1)
    with live_display(board, every_s=0) as tick:
        board.on_event(
            "start",
            {
                "number": 0,
                "params": {"note": f"v{EVIL}{MARKUP}"},
                "max_tokens": 100,
                "worker": f"w{EVIL}",
            },
        )
        wide_console().print(board.render())
        board.on_event(
            "end",
            {
                "number": 0,
                "outcome": "crashed",
                "values": None,
                "reason": f"r{EVIL}{MARKUP}\nfake row",
            },
        )
        tick()
    out, err = capsys.readouterr()
    assert _raw_controls(out) == [] and _raw_controls(err) == []
    assert r"note=v\x1b]0;PWNED\x07\x9b2J[/x]" in out and r"w\x1b]0;PWNED" in out
    assert r"r\x1b]0;PWNED\x07\x9b2J[/x]\nfake row" in err
    assert not any(line.startswith("fake row") for line in err.splitlines())
