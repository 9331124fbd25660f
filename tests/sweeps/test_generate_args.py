"""``sweeps generate``'s sampling arguments (issue 24, item 8): ``--temperature nan`` and
``1e-300`` and ``--seed 99999999999999999999999`` were tracebacks, and ``--seed -1`` was accepted
though ``train`` refuses it. Each is now one line naming the flag and the range, exit 2, checked
before the checkpoint is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sweeps.cli import assert_user_error, sweeps


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--temperature", "nan", "temperature must be 0 (greedy) or a number from 1e-06"),
        ("--temperature", "inf", "temperature must be 0"),
        ("--temperature", "1e-300", "temperature must be 0"),
        ("--temperature", "-1", "temperature must be 0"),
        ("--seed", "99999999999999999999999", "seed"),
        ("--seed", "-1", "seed"),
    ],
)
def test_bad_sampling_arguments_are_one_line(
    flag: str, value: str, needle: str, tmp_path: Path
) -> None:
    proc = sweeps("generate", str(tmp_path / "no-run"), flag, value, cwd=tmp_path)
    assert_user_error(proc, needle)
