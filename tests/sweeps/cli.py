"""Running the CLI as a user does, in a real process, and checking its one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def sweeps(*args: str, cwd: Path | None = None, timeout: float = 300
           ) -> subprocess.CompletedProcess[str]:
    """``python -m sweeps ARGS`` in a fresh process; its exit code and output."""
    return subprocess.run([sys.executable, "-m", "sweeps", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def assert_user_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one line on stderr naming the problem (every needle in it), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
