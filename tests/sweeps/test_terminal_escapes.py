"""What reaches a terminal from a shared database (issue 24, item 10): ``export --format csv``
to a terminal wrote a reason's raw ESC/OSC/BEL, and U+202E (right-to-left override) passed
unescaped in ``status`` and ``trials``. Both are now escaped where shown; a pipe still gets the
data as stored."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import optuna
import pytest

from sweeps.text import escape_controls
from tests.sweeps.cli import sweeps

ESC = "\x1b]0;PWNED\x07"
RLO = "\u202e"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('rlo') / 'shared.db'}"
    name = f"a{RLO}gpj.exe"
    study = optuna.create_study(storage=url, study_name=name)
    trial = study.ask()
    trial.set_user_attr("reason", f"r{ESC}{RLO}x")
    study.tell(trial, 1.5)
    return url, name


def test_bidi_controls_are_escaped_where_shown() -> None:
    assert escape_controls(f"a{RLO}b\u2066c\u200f") == r"a\u202eb\u2066c\u200f"


def test_status_and_trials_escape_a_right_to_left_override(db: tuple[str, str]) -> None:
    url, name = db
    for args in (["status", "--storage", url], ["trials", name, "--storage", url]):
        proc = sweeps(*args)
        assert proc.returncode == 0, proc.stderr
        assert RLO not in proc.stdout + proc.stderr and r"a\u202egpj.exe" in proc.stdout


def _on_a_terminal(*args: str) -> str:
    """stdout of ``sweeps ARGS`` written to a pseudo-terminal."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps", *args], stdout=follower, stderr=subprocess.PIPE
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_export_csv_to_a_terminal_escapes_and_to_a_pipe_keeps_the_data(db: tuple[str, str]) -> None:
    url, name = db
    shown = _on_a_terminal("export", name, "--storage", url, "--format", "csv")
    assert "\x1b" not in shown and "\x07" not in shown and RLO not in shown
    assert r"r\x1b]0;PWNED\x07\u202ex" in shown
    piped = sweeps("export", name, "--storage", url, "--format", "csv")
    assert f"r{ESC}{RLO}x" in piped.stdout  # the data as stored, for a program to read
