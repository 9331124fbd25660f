"""Running the CLI as a user does, in a real process (or in this one, where only the exit code
and the output matter), and checking its one-line errors."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path


def sweeps(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m sweeps ARGS`` in a fresh process; its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def sweeps_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``sweeps ARGS`` through ``cli.main`` in this process: the exit code and output a process
    would give, without an interpreter start and the imports per call (seconds on a busy
    machine). For checks of what a command prints and changes; a test that a command works as
    a process (signals, stdin, the entry point) uses ``sweeps``."""
    from sweeps import cli

    out, err = io.StringIO(), io.StringIO()
    old, code = sys.argv, 0
    sys.argv = ["sweeps", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.argv = old
    return subprocess.CompletedProcess(["sweeps", *args], code, out.getvalue(), err.getvalue())


def assert_user_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one line on stderr naming the problem (every needle in it), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
